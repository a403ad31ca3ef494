// tandem-train: parses flags, runs the job, maps failures to the contract's exit codes
// (0 success, 2 usage error, 1 any other failure, 75 stopped by SIGUSR1 to be resumed).
#include <spdlog/spdlog.h>

#include <cstdio>
#include <exception>

#include "collectives/init.h"
#include "collectives/slurm_env.h"
#include "train/console_log.h"
#include "train/train_config.h"
#include "train/trainer.h"

int main(int argc, char** argv) {
  std::optional<tandem::TrainConfig> config;
  try {
    config = tandem::parse_train_args(argc, argv);
  } catch (const tandem::UsageError& e) {
    std::fprintf(stderr, "tandem-train: usage error: %s\nRun with --help for the accepted flags.\n", e.what());
    return 2;
  }
  if (!config) return 0;
  spdlog::set_default_logger(tandem::make_split_console_logger());
  spdlog::set_level(spdlog::level::from_str(config->log_level));
  spdlog::set_pattern("[%H:%M:%S.%e] %l %v");
  try {
    if (tandem::run_training(*config) == tandem::TrainOutcome::stopped_to_resume) return tandem::kExitStoppedToResume;
  } catch (const tandem::UsageError& e) {
    spdlog::error("tandem-train: usage error: {}", e.what());
    return 2;
  } catch (const tandem::slurm::SlurmEnvError& e) {  // srun's settings disagree: a usage error
    spdlog::error("tandem-train: usage error: {}", e.what());
    return 2;
  } catch (const std::exception& e) {
    spdlog::error("tandem-train failed: {}", e.what());
    return 1;
  }
  return 0;
}
