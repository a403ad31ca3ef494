// Helper of the checkpoint tests (tests/checkpoint/CMakeLists.txt):
//   ckpt_helper make ROOT STEP [sgd|adamw]
//       saves a checkpoint of the zoo's mlp shape (784-64-64-10, names fc1..fc3) after STEP
//       optimizer steps, and writes the expected values: "file name index bits" lines (first and
//       last element of every tensor, as hex float bits) for the independent reader.
//       (ROOT/expected-STEP.txt, outside the checkpoint: a checkpoint holds only its files.)
//   ckpt_helper kill-during-save ROOT
//       the "kill -9 during a save leaves the previous checkpoint loadable" test: saves A,
//       then saves B of the same large model in a child process, SIGKILLs the child once B's
//       model.safetensors is partly written, and checks that A is listed, picked by
//       --resume auto and loads bit-exactly, and that the next save succeeds and clears the
//       leftover. It also measures that saving and loading 168 MB of tensors raises peak
//       memory by a few MiB at most (no second copy of the model). The library has no test hook: the child is killed from outside, by
//       watching the file system, as a real crash would happen.
// Exit 0 on success, 1 with "FAIL: ..." otherwise.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <spdlog/spdlog.h>
#include <stdexcept>
#include <string>
#include <thread>

#include "runtime/checkpoint/checkpoint.h"
#include "tests/checkpoint/tiny_model.h"

namespace {

using namespace tandem;
namespace fs = std::filesystem;

struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void check(bool ok, const std::string& what) {
  if (!ok) throw Failure(what);
  std::printf("ok: %s\n", what.c_str());
}

CheckpointMeta meta_for(int64_t step, int64_t hidden, int64_t input) {
  CheckpointMeta m;
  m.step = step;
  m.epoch = step / 10;
  m.step_in_epoch = step % 10;
  m.seed = 7;
  m.dataset = "synthetic";
  m.batch_size = 32;
  m.model_name = "mlp";
  m.hidden = hidden;
  m.input_shape = input == 784 ? Shape{1, 28, 28} : Shape{input};
  m.classes = 10;
  m.lr_schedule = LrScheduleInfo{"warmup_cosine", 0.05, 0.0, 2, 1000};
  return m;
}

void write_expected(std::ofstream& out, const char* file, const std::string& name, const Tensor& t) {
  const uint32_t* bits = static_cast<const uint32_t*>(t.raw());
  for (int64_t i : {int64_t{0}, t.numel() - 1}) {
    char line[512];
    std::snprintf(line, sizeof line, "%s %s %lld %08x\n", file, name.c_str(), static_cast<long long>(i), bits[i]);
    out << line;
  }
}

int make(const std::string& root, int64_t step, const std::string& kind) {
  OptimizerConfig oc;
  oc.kind = parse_optimizer_kind(kind);
  auto model = test::make_mlp(784, 64, 10, 3, 3);
  auto optimizer = make_optimizer(oc, model->parameters());
  test::train_steps(*model, *optimizer, static_cast<int>(step), 5);
  const std::string path = save_checkpoint(root, *model, *optimizer, meta_for(step, 64, 784));
  std::ofstream out(fs::path(root) / ("expected-" + std::to_string(step) + ".txt"));
  for (const Parameter* p : model->parameters()) write_expected(out, kModelFile, p->name, p->value);
  for (const auto& [name, t] : optimizer->state()) write_expected(out, kOptimizerFile, name, t);
  std::printf("%s\n", path.c_str());
  return 0;
}

// Resident memory in MiB: "VmRSS" (now) or "VmHWM" (peak since the last reset_peak()).
double status_mib(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0) return std::stod(line.substr(field.size() + 1)) / 1024.0;  // kB
  throw Failure("no " + field + " in /proc/self/status");
}
// Resets VmHWM to the current RSS (Linux >= 4.0), so a peak measures one operation.
void reset_peak() { std::ofstream("/proc/self/clear_refs") << "5"; }

// The extra peak memory of fn(), in MiB.
template <typename Fn>
double extra_peak_mib(Fn fn) {
  reset_peak();
  const double before = status_mib("VmRSS");
  fn();
  return status_mib("VmHWM") - before;
}

// Saving or loading must not hold a second copy of the model: the peak may grow by the
// headers and a staging chunk, far below the model's 84 MB.
constexpr double kMaxExtraMiB = 24;

std::string mib(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f MiB (limit %.0f)", v, kMaxExtraMiB);
  return buf;
}

// The first ".tmp-" directory of `pid` under root holding a model file of at least `bytes`.
bool partly_written(const fs::path& root, pid_t pid, uintmax_t bytes) {
  const std::string owner = std::to_string(pid);
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(".tmp-", 0) != 0 || !name.ends_with(owner) || name[name.size() - owner.size() - 1] != '-') continue;
    std::error_code size_ec;
    if (fs::file_size(e.path() / kModelFile, size_ec) >= bytes && !size_ec) return true;
  }
  return false;
}

int kill_during_save(const std::string& root_dir) {
  const fs::path root(root_dir);
  fs::remove_all(root);
  // ~21M parameters (84 MB, plus 84 MB of momentum): a save takes long enough that the
  // kill lands inside it on any disk, yet the test stays within a few seconds.
  const int64_t input = 1024, hidden = 4096;
  auto model = test::make_mlp(input, hidden, 10, 11, 3);
  OptimizerConfig oc;
  auto optimizer = make_optimizer(oc, model->parameters());
  test::train_steps(*model, *optimizer, 1, 1);
  std::string a;
  const double save_extra =
      extra_peak_mib([&] { a = save_checkpoint(root_dir, *model, *optimizer, meta_for(1, hidden, input), 2); });
  check(save_extra < kMaxExtraMiB, "saving 168 MB of tensors raised peak memory by " + mib(save_extra));
  const std::string checksum_a = parameter_checksum(*model);
  test::train_steps(*model, *optimizer, 1, 2);

  std::fflush(stdout);
  const pid_t child = fork();
  if (child < 0) throw Failure("fork failed");
  if (child == 0) {
    try {
      save_checkpoint(root_dir, *model, *optimizer, meta_for(2, hidden, input), 2);
    } catch (...) {
      _exit(3);
    }
    _exit(0);
  }
  // Bounded wait: poll until B's model file is partly written, then kill -9.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  bool killed = false;
  while (std::chrono::steady_clock::now() < deadline) {
    if (partly_written(root, child, 1 << 20)) {
      ::kill(child, SIGKILL);
      killed = true;
      break;
    }
    int status = 0;
    if (waitpid(child, &status, WNOHANG) == child)
      throw Failure("the child finished saving B before it could be killed (status " + std::to_string(status) +
                    "); the test needs a slower save (a larger model)");
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  if (!killed) {
    ::kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    throw Failure("timed out after 60 s waiting for the child to start writing B's model.safetensors");
  }
  int status = 0;
  waitpid(child, &status, 0);
  check(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "the child saving B died of SIGKILL mid-write");
  check(!fs::exists(root / checkpoint_dir_name(2)), "B never appeared under its final name");

  check(list_checkpoints(root_dir) == std::vector<std::string>{a}, "list_checkpoints shows only A");
  check(resolve_resume("auto", root_dir) == a, "--resume auto picks A");
  VerifyResult v = verify_checkpoint(a);
  check(v.ok(), "A verifies: " + v.summary());
  auto fresh = test::make_mlp(input, hidden, 10, 99, 3);
  auto fresh_opt = make_optimizer(oc, fresh->parameters());
  CheckpointMeta m;
  const double load_extra = extra_peak_mib([&] { m = load_checkpoint(a, *fresh, fresh_opt.get()); });
  check(load_extra < kMaxExtraMiB, "loading them raised peak memory by " + mib(load_extra));
  check(parameter_checksum(*fresh) == checksum_a && m.step == 1 && fresh_opt->steps_taken() == 1,
        "A loads bit-exactly (parameters " + checksum_a + ", step 1)");

  // The restarted job saves B again: it succeeds and clears the dead writer's leftover.
  const std::string b = save_checkpoint(root_dir, *model, *optimizer, meta_for(2, hidden, input), 2);
  check(resolve_resume("auto", root_dir) == b, "after the restart's save, --resume auto picks B");
  bool leftovers = false;
  for (const fs::directory_entry& e : fs::directory_iterator(root))
    leftovers |= e.path().filename().string().rfind(".tmp-", 0) == 0;
  check(!leftovers, "the killed save's temporary directory was cleaned up");
  fs::remove_all(root);
  std::printf("PASS: kill -9 during a save left the previous checkpoint loadable\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::warn);
  try {
    const std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "make" && (argc == 4 || argc == 5)) return make(argv[2], std::stoll(argv[3]), argc == 5 ? argv[4] : "sgd");
    if (cmd == "kill-during-save" && argc == 3) return kill_during_save(argv[2]);
    std::fprintf(stderr, "usage: ckpt_helper make ROOT STEP [sgd|adamw] | kill-during-save ROOT\n");
    return 2;
  } catch (const std::exception& e) {
    std::printf("FAIL: %s\n", e.what());
    return 1;
  }
}
