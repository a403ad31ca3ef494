// --init-from, --init-skip and --freeze applied inside the model factory (fine_tune.h).
#include "train/fine_tune.h"

#include <memory>
#include <spdlog/spdlog.h>
#include <stdexcept>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/freeze.h"

namespace tandem {

ModelFactory fine_tune_model_factory(const ModelConfig& model, const TrainConfig& c) {
  auto logged = std::make_shared<bool>(false);
  return [model, init_from = c.init_from, skip = c.init_skip, freeze = c.freeze, seed = c.seed, logged] {
    std::unique_ptr<Model> m = build_model(model, seed);
    const bool log = !*logged;
    *logged = true;
    if (!init_from.empty()) {
      try {
        LoadWeightsResult r = load_weights(init_from, *m, skip);
        if (log)
          spdlog::info("init-from: {} tensors from {}{}{}", r.loaded.size(), r.source,
                       r.skipped.empty() ? "" : "; fresh initialisation kept for " + list_names(r.skipped),
                       r.ignored.empty() ? "" : "; ignored " + list_names(r.ignored));
      } catch (const std::invalid_argument& e) {  // WeightsMismatch, or no checkpoint there
        throw UsageError("--init-from " + init_from + ": " + e.what());
      }
    }
    if (!freeze.empty()) {
      try {
        const int n = freeze_parameters(*m, freeze);
        if (trainable_parameter_count(*m) == 0 && m->num_parameters() > 0)
          throw std::invalid_argument("it freezes every parameter of the model: nothing would train");
        if (log)
          spdlog::info("freeze: {} parameters frozen ({} of {} elements still train): {}", n,
                       trainable_parameter_count(*m), m->num_parameters(), list_names(frozen_parameter_names(*m)));
      } catch (const std::invalid_argument& e) {
        std::string flags;
        for (const std::string& p : freeze) flags += " --freeze " + p;
        throw UsageError(flags.substr(1) + ": " + e.what());
      }
    }
    return m;
  };
}

}  // namespace tandem
