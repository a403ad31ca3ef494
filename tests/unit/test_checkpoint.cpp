// Checkpoint tests (runtime/checkpoint): bit-exact save/load of parameters and SGD/AdamW
// state, a resumed optimizer continuing bit-identically, the safetensors files read back by
// hand (header JSON, offsets, raw bytes), keep_last pruning, refusal of another model
// (naming the first differing tensor, before touching the model), every kind of corruption
// rejected with the file named (and a small fuzz: no input crashes), resolve_resume's
// choices, and a crash's leftover .tmp- directory being ignored and later cleaned.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/safetensors.h"
#include "tests/checkpoint/tiny_model.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;
using test::make_mlp;
using test::train_steps;

struct TempDir {
  fs::path path = fs::temp_directory_path() /
                  ("tandem_test_ckpt_" + std::to_string(getpid()) + "_" + std::to_string(next_id()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string str() const { return path.string(); }
  static int next_id() {
    static std::atomic<int> n{0};
    return n++;
  }
};

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}
void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << bytes;
}
std::string bytes_of(const Tensor& t) { return {static_cast<const char*>(t.raw()), t.nbytes()}; }

CheckpointMeta meta_for(int64_t step) {
  CheckpointMeta m;
  m.step = step;
  m.epoch = 1;
  m.step_in_epoch = 7;
  m.seed = 42;
  m.dataset = "synthetic";
  m.batch_size = 16;
  m.replicas = 2;
  m.model_name = "mlp";
  m.hidden = 16;
  m.input_shape = {1, 2, 4};
  m.classes = 4;
  m.lr_schedule = LrScheduleInfo{"warmup_cosine", 0.05, 0.0, 3, 100};
  m.mode = "ddp";
  m.world_size = 2;
  m.extra["note"] = "unit test";
  return m;
}

// A model and optimizer with a few steps behind them.
struct Trained {
  std::unique_ptr<Model> model;
  std::unique_ptr<Optimizer> optimizer;
  Trained(OptimizerConfig oc, uint64_t seed, int steps, int64_t hidden = 16, int layers = 2) {
    model = make_mlp(8, hidden, 4, seed, layers);
    optimizer = make_optimizer(oc, model->parameters());
    train_steps(*model, *optimizer, steps, seed);
  }
};

OptimizerConfig sgd() {
  OptimizerConfig c;
  c.momentum = 0.9f;
  c.nesterov = true;
  c.weight_decay = 1e-4f;
  return c;
}
OptimizerConfig adamw() {
  OptimizerConfig c;
  c.kind = OptimizerKind::adamw;
  c.weight_decay = 0.01f;
  return c;
}

void expect_same_state(const Trained& a, const Trained& b) {
  ASSERT_EQ(a.model->parameters().size(), b.model->parameters().size());
  for (size_t i = 0; i < a.model->parameters().size(); ++i)
    EXPECT_EQ(bytes_of(a.model->parameters()[i]->value), bytes_of(b.model->parameters()[i]->value))
        << a.model->parameters()[i]->name;
  auto sa = a.optimizer->state(), sb = b.optimizer->state();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) EXPECT_EQ(bytes_of(sa[i].second), bytes_of(sb[i].second)) << sa[i].first;
  EXPECT_EQ(a.optimizer->steps_taken(), b.optimizer->steps_taken());
}

class CheckpointRoundTrip : public ::testing::TestWithParam<OptimizerConfig (*)()> {};

TEST_P(CheckpointRoundTrip, BitExactAndResumesIdentically) {
  TempDir dir;
  Trained a(GetParam()(), 1, 3);
  const std::string path = save_checkpoint(dir.str(), *a.model, *a.optimizer, meta_for(3));
  EXPECT_EQ(fs::path(path).filename(), "step-00000003");
  EXPECT_TRUE(verify_checkpoint(path).ok()) << verify_checkpoint(path).summary();

  Trained b(GetParam()(), 2, 1);  // another seed, another step count: everything must be overwritten
  CheckpointMeta m = load_checkpoint(path, *b.model, b.optimizer.get());
  expect_same_state(a, b);
  EXPECT_EQ(m.step, 3);
  EXPECT_EQ(m.position(), (LoaderPosition{1, 7}));
  EXPECT_EQ(m.seed, 42u);
  EXPECT_EQ(m.model_name, "mlp");
  EXPECT_EQ(m.input_shape, (Shape{1, 2, 4}));
  EXPECT_EQ(m.optimizer_steps, 3);
  EXPECT_EQ(m.optimizer.kind, GetParam()().kind);
  EXPECT_EQ(m.optimizer.weight_decay, GetParam()().weight_decay);
  ASSERT_TRUE(m.lr_schedule);
  EXPECT_EQ(m.lr_schedule->total_steps, 100);
  EXPECT_EQ(m.extra.at("note"), "unit test");
  EXPECT_EQ(m.param_checksum, parameter_checksum(*a.model));

  // The property resume relies on: the same further steps give bit-identical results.
  train_steps(*a.model, *a.optimizer, 2, 9);
  train_steps(*b.model, *b.optimizer, 2, 9);
  expect_same_state(a, b);
}

INSTANTIATE_TEST_SUITE_P(Optimizers, CheckpointRoundTrip, ::testing::Values(&sgd, &adamw));

// Reads model.safetensors by hand, per the format's description, not through our reader.
TEST(Checkpoint, SafetensorsFilesAreReal) {
  TempDir dir;
  Trained a(sgd(), 1, 2);
  const fs::path path = save_checkpoint(dir.str(), *a.model, *a.optimizer, meta_for(2));
  for (const char* file : {kModelFile, kOptimizerFile}) {
    const std::string bytes = read_bytes(path / file);
    ASSERT_GE(bytes.size(), 8u);
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
    EXPECT_EQ(n % 8, 0u) << "header padded to 8 bytes";
    ASSERT_LE(8 + n, bytes.size());
    auto header = nlohmann::json::parse(bytes.substr(8, n));
    ASSERT_TRUE(header.is_object());
    ASSERT_TRUE(header.contains("__metadata__"));
    for (auto& [k, v] : header["__metadata__"].items()) EXPECT_TRUE(v.is_string()) << k;
    const std::string data = bytes.substr(8 + n);
    uint64_t covered = 0;
    std::vector<std::pair<std::string, Tensor>> expected;
    if (std::string(file) == kModelFile)
      for (Parameter* p : a.model->parameters()) expected.emplace_back(p->name, p->value);
    else
      expected = a.optimizer->state();
    EXPECT_EQ(header.size(), expected.size() + 1);
    for (const auto& [name, t] : expected) {
      ASSERT_TRUE(header.contains(name)) << name;
      const auto& e = header[name];
      EXPECT_EQ(e["dtype"], "F32");
      EXPECT_EQ(e["shape"].get<std::vector<int64_t>>(), t.shape()) << name;
      const uint64_t begin = e["data_offsets"][0], end = e["data_offsets"][1];
      ASSERT_EQ(end - begin, t.nbytes()) << name;
      ASSERT_LE(end, data.size()) << name;
      EXPECT_EQ(data.substr(begin, end - begin), bytes_of(t)) << name;
      covered += end - begin;
    }
    EXPECT_EQ(covered, data.size()) << "no gap, no overlap, nothing after the tensors";
  }
  auto opt_header = read_safetensors_header((path / kOptimizerFile).string());
  EXPECT_EQ(opt_header.metadata.at("steps_taken"), "2");
  EXPECT_TRUE(opt_header.find("fc1.weight.momentum_buffer"));
}

TEST(Checkpoint, KeepLastPrunesOnlyOlderOnes) {
  TempDir dir;
  Trained a(sgd(), 1, 1);
  for (int64_t step : {1, 2, 3, 4, 5}) save_checkpoint(dir.str(), *a.model, *a.optimizer, meta_for(step), 2);
  std::vector<std::string> expected = {(dir.path / "step-00000005").string(), (dir.path / "step-00000004").string()};
  EXPECT_EQ(list_checkpoints(dir.str()), expected);
  for (const auto& e : fs::directory_iterator(dir.path))
    EXPECT_NE(e.path().filename().string()[0], '.') << "left behind: " << e.path();
  // Saving the same step again replaces it (atomically) with the new content.
  train_steps(*a.model, *a.optimizer, 1, 3);
  const std::string path = save_checkpoint(dir.str(), *a.model, *a.optimizer, meta_for(5), 2);
  EXPECT_EQ(list_checkpoints(dir.str()), expected);
  EXPECT_EQ(read_checkpoint_meta(path).param_checksum, parameter_checksum(*a.model));
}

// Every refusal must leave the model and optimizer untouched.
void expect_refused(const std::string& path, Trained& run, const std::vector<std::string>& needles) {
  const std::string before = parameter_checksum(*run.model);
  const std::string state_before = bytes_of(run.optimizer->state().front().second);
  try {
    load_checkpoint(path, *run.model, run.optimizer.get());
    ADD_FAILURE() << "loaded without complaint";
  } catch (const CheckpointError& e) {
    for (const std::string& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
  EXPECT_EQ(parameter_checksum(*run.model), before);
  EXPECT_EQ(bytes_of(run.optimizer->state().front().second), state_before);
}

TEST(Checkpoint, RefusesAnotherModelNamingTheFirstDifference) {
  TempDir dir;
  Trained saved(sgd(), 1, 1);
  const std::string path = save_checkpoint(dir.str(), *saved.model, *saved.optimizer, meta_for(1));
  Trained wider(sgd(), 1, 1, 32);
  expect_refused(path, wider, {"model.safetensors", "'fc1.weight'", "[16, 8]", "[32, 8]", "hidden 16"});
  Trained deeper(sgd(), 1, 1, 16, 3);  // fc2 is 16x16 here, 16x4 there: the first difference
  expect_refused(path, deeper, {"'fc2.weight'", "[4, 16]", "[16, 16]"});

  // Same shapes but one tensor more, then one fewer.
  TempDir dir3;
  Trained three(sgd(), 1, 1, 4, 3);  // 8 -> 4 -> 4 -> 4
  const std::string path3 = save_checkpoint(dir3.str(), *three.model, *three.optimizer, meta_for(1));
  Trained two(sgd(), 1, 1, 4, 2);
  expect_refused(path3, two, {"'fc3.bias' in the checkpoint does not exist in this model"});
  TempDir dir2;
  const std::string path2 = save_checkpoint(dir2.str(), *two.model, *two.optimizer, meta_for(1));
  expect_refused(path2, three, {"'fc3.weight'", "missing from the checkpoint"});

  Trained other_kind(adamw(), 1, 1);
  expect_refused(path, other_kind, {"sgd", "adamw"});
}

TEST(Checkpoint, RefusesADtypeMismatch) {
  // Forge a self-consistent checkpoint whose fc1.bias is F16 (our writer would never).
  TempDir dir;
  Trained a(sgd(), 1, 1);
  const fs::path path = save_checkpoint(dir.str(), *a.model, *a.optimizer, meta_for(1));
  NamedTensors tensors;
  for (Parameter* p : a.model->parameters())
    tensors.emplace_back(p->name, p->name == "fc1.bias" ? Tensor::zeros(p->value.shape(), DType::f16) : p->value);
  SafetensorsChecksums sums = write_safetensors((path / kModelFile).string(), tensors, {});
  CheckpointMeta m = read_checkpoint_meta(path.string());
  m.files[kModelFile] = {sums.file_bytes, sums.file_crc32, sums.tensor_crc32};
  m.param_checksum.clear();
  write_bytes(path / kMetaFile, checkpoint_meta_to_json(m));
  ASSERT_TRUE(verify_checkpoint(path.string()).ok()) << verify_checkpoint(path.string()).summary();
  Trained b(sgd(), 2, 1);
  expect_refused(path.string(), b, {"'fc1.bias' is F16 in the checkpoint but F32"});
}

// Each damage is rejected by verify and by load, naming the file.
TEST(Checkpoint, CorruptionsAreCaughtAndNamed) {
  TempDir dir;
  Trained a(sgd(), 1, 2);
  const fs::path good = save_checkpoint(dir.str(), *a.model, *a.optimizer, meta_for(2));
  struct Damage {
    const char* name;
    const char* file;
    std::function<void(std::string&)> edit;  // on the file's bytes; nullptr: delete the file
    std::vector<std::string> needles;
  };
  const std::vector<Damage> damages = {
      {"truncated", kModelFile, [](std::string& b) { b.resize(b.size() / 2); }, {"model.safetensors", "truncated"}},
      {"data byte", kModelFile, [](std::string& b) { b.back() ^= 0x01; }, {"model.safetensors", "checksum mismatch"}},
      {"optimizer data", kOptimizerFile, [](std::string& b) { b[b.size() - 5] ^= 0x40; },
       {"optimizer.safetensors", "checksum mismatch"}},
      {"header json", kModelFile, [](std::string& b) { b[8] = '['; }, {"model.safetensors", "header"}},
      {"header name", kModelFile, [](std::string& b) { b[b.find("fc1.bias")] = 'g'; },
       {"model.safetensors", "'gc1.bias'"}},
      {"header length", kModelFile, [](std::string& b) { std::memset(b.data(), 0xff, 8); },
       {"model.safetensors", "header length"}},
      {"meta flip", kMetaFile, [](std::string& b) { b[b.find("\"step\": 2") + 8] = '3'; },
       {"meta.json", "checksum mismatch"}},
      {"meta missing", kMetaFile, nullptr, {"meta.json: missing"}},
      {"model missing", kModelFile, nullptr, {"model.safetensors: missing"}},
  };
  for (const Damage& d : damages) {
    SCOPED_TRACE(d.name);
    TempDir copy;
    const fs::path ck = copy.path / "step-00000002";
    fs::copy(good, ck);
    if (d.edit) {
      std::string bytes = read_bytes(ck / d.file);
      d.edit(bytes);
      write_bytes(ck / d.file, bytes);
    } else {
      fs::remove(ck / d.file);
    }
    VerifyResult v = verify_checkpoint(ck.string());
    EXPECT_FALSE(v.ok());
    for (const std::string& n : d.needles) EXPECT_NE(v.summary().find(n), std::string::npos) << v.summary();
    Trained b(sgd(), 3, 1);
    expect_refused(ck.string(), b, {d.file});
  }
}

// Random damage to the tensor files is always detected (a CRC covers every byte) and nothing
// crashes, whatever the bytes.
TEST(Checkpoint, FuzzedFilesNeverCrash) {
  TempDir dir;
  Trained a(adamw(), 1, 1);
  const fs::path good = save_checkpoint(dir.str(), *a.model, *a.optimizer, meta_for(1));
  std::mt19937_64 rng(1234);
  const std::string originals[2] = {read_bytes(good / kModelFile), read_bytes(good / kOptimizerFile)};
  for (int iter = 0; iter < 150; ++iter) {
    const int which = iter % 2;
    const char* file = which ? kOptimizerFile : kModelFile;
    std::string bytes = originals[which];
    switch (rng() % 4) {
      case 0:  // a few random bytes anywhere
        for (int k = 0, n = 1 + static_cast<int>(rng() % 4); k < n; ++k) bytes[rng() % bytes.size()] ^= 1 + rng() % 255;
        break;
      case 1: bytes.resize(rng() % bytes.size()); break;                       // truncation
      case 2: bytes[8 + rng() % 64] = static_cast<char>(rng() % 256); break;   // the header
      case 3:  // a random header length
        for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(i < 3 ? rng() % 256 : 0);
        break;
    }
    if (bytes == originals[which]) continue;
    write_bytes(good / file, bytes);
    VerifyResult v = verify_checkpoint(good.string());
    EXPECT_FALSE(v.ok()) << "iteration " << iter << " went unnoticed";
    EXPECT_NE(v.summary().find(file), std::string::npos) << v.summary();
    Trained b(adamw(), 2, 1);
    EXPECT_THROW(load_checkpoint(good.string(), *b.model, b.optimizer.get()), CheckpointError);
    write_bytes(good / file, originals[which]);
  }
  EXPECT_TRUE(verify_checkpoint(good.string()).ok());
}

pid_t dead_pid() {
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  return pid;
}

TEST(Checkpoint, ResolveResume) {
  TempDir dir;
  EXPECT_EQ(resolve_resume("", dir.str()), "");
  EXPECT_EQ(resolve_resume("auto", dir.str()), "");
  EXPECT_EQ(resolve_resume("auto", (dir.path / "not-yet").string()), "");
  EXPECT_THROW(resolve_resume("auto", ""), std::invalid_argument);

  Trained a(sgd(), 1, 1);
  for (int64_t step : {10, 20, 30}) save_checkpoint(dir.str(), *a.model, *a.optimizer, meta_for(step));
  const std::string s20 = (dir.path / "step-00000020").string(), s30 = (dir.path / "step-00000030").string();
  EXPECT_EQ(resolve_resume("auto", dir.str()), s30);
  EXPECT_EQ(resolve_resume(s20, ""), s20);
  EXPECT_EQ(resolve_resume("step-00000020", dir.str()), s20);  // relative to --checkpoint-dir
  EXPECT_THROW(resolve_resume(dir.str(), dir.str()), CheckpointError);  // a root, not a checkpoint

  // A crash mid-save leaves a hidden directory: never listed, never resumed from.
  const fs::path leftover = dir.path / (".tmp-step-00000040-" + std::to_string(dead_pid()));
  fs::create_directories(leftover);
  write_bytes(leftover / kModelFile, "partial");
  EXPECT_EQ(list_checkpoints(dir.str()).size(), 3u);
  EXPECT_EQ(resolve_resume("auto", dir.str()), s30);

  // Corrupt newest: skipped (with a warning) for the previous; named when asked for explicitly.
  std::string bytes = read_bytes(fs::path(s30) / kModelFile);
  bytes[bytes.size() / 2] ^= 0x10;
  write_bytes(fs::path(s30) / kModelFile, bytes);
  EXPECT_EQ(resolve_resume("auto", dir.str()), s20);
  try {
    resolve_resume(s30, dir.str());
    ADD_FAILURE() << "an invalid explicit checkpoint was accepted";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("step-00000030/model.safetensors"), std::string::npos) << e.what();
  }

  // The next save cleans the dead writer's leftover; the live process's own are never touched.
  save_checkpoint(dir.str(), *a.model, *a.optimizer, meta_for(31));
  EXPECT_FALSE(fs::exists(leftover));
}

TEST(Checkpoint, PositionForOtherWorldSizes) {
  CheckpointMeta m = meta_for(1);  // 7 batches of 16 x 2 replicas: 224 samples
  EXPECT_EQ(m.samples_in_epoch(), 224);
  EXPECT_EQ(m.position_for(16, 2), (LoaderPosition{1, 7}));
  EXPECT_EQ(m.position_for(32, 1), (LoaderPosition{1, 7}));
  EXPECT_EQ(m.position_for(8, 2), (LoaderPosition{1, 14}));
  EXPECT_EQ(m.position_for(56, 1), (LoaderPosition{1, 4}));
  EXPECT_THROW(m.position_for(48, 1), CheckpointError);
}

TEST(Checkpoint, MetaJsonRoundTrip) {
  CheckpointMeta m = meta_for(12);
  m.optimizer = adamw();
  m.optimizer_steps = 12;
  m.seed = ~uint64_t{0};
  m.files["model.safetensors"] = {123, 0xdeadbeef, {{"fc1.weight", 0x01020304}}};
  CheckpointMeta r = checkpoint_meta_from_json(checkpoint_meta_to_json(m), "meta.json");
  EXPECT_EQ(r.seed, m.seed);
  EXPECT_EQ(r.optimizer.eps, m.optimizer.eps);
  EXPECT_EQ(r.optimizer.beta2, m.optimizer.beta2);
  EXPECT_EQ(r.files.at("model.safetensors").tensor_crc32.at("fc1.weight"), 0x01020304u);
  EXPECT_EQ(checkpoint_meta_to_json(r), checkpoint_meta_to_json(m));
  EXPECT_THROW(checkpoint_meta_from_json("{\"format\": 1}", "meta.json"), CheckpointError);
  EXPECT_THROW(checkpoint_meta_from_json("not json", "meta.json"), CheckpointError);
}

}  // namespace
}  // namespace tandem
