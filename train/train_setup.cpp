// tandem-train's set-up: data, device, and the flags mapped onto the public API's structs.
#include "train/train_setup.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <stdexcept>

#include "zoo/generate.h"
#include "zoo/gpt.h"
#include "collectives/slurm_env.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/allocator.h"
#include "runtime/cpu/bf16_gemm.h"
#include "runtime/cuda_device.h"
#include "runtime/kernels.h"

namespace tandem {

namespace {

// A fine-tune of a language model keeps its pretrained vocabulary: the --init-from
// checkpoint's (a checkpoint directory, the newest of a directory of them, or the model file
// of one), when it records one. nullopt: the text's own bytes.
std::optional<std::vector<uint8_t>> init_from_vocab(const TrainConfig& c) {
  namespace fs = std::filesystem;
  if (c.init_from.empty()) return std::nullopt;
  std::error_code ec;
  const fs::path p = c.init_from;
  std::string dir;
  if (fs::exists(p / "meta.json", ec)) {
    dir = p.string();
  } else if (fs::is_directory(p, ec)) {
    const std::vector<std::string> found = list_checkpoints(p.string());
    if (!found.empty()) dir = found.front();
  } else if (fs::exists(p.parent_path() / "meta.json", ec)) {
    dir = p.parent_path().string();
  }
  if (dir.empty()) return std::nullopt;  // load_weights names what is wrong with the path
  const CheckpointMeta meta = read_checkpoint_meta(dir);
  if (meta.extra.count("text.vocab_hex") == 0) return std::nullopt;
  return vocab_from_meta(meta);
}

}  // namespace

TrainData load_train_data(const TrainConfig& c) {
  TrainData d;
  if (text_data(c)) {
    const std::optional<std::vector<uint8_t>> vocab = init_from_vocab(c);
    const std::vector<uint8_t>* v = vocab ? &*vocab : nullptr;
    // A text file that cannot serve (missing, empty, too short, a changed shakespeare copy)
    // is bad input: a usage error that names the file.
    try {
      if (c.data == "shakespeare")
        d.text = std::make_shared<const TextDataset>(
            load_text(default_shakespeare_path(), "shakespeare", std::string(kShakespeareSha256), c.context, v));
      else
        d.text = std::make_shared<const TextDataset>(load_text(text_data_path(c), c.data, std::nullopt, c.context, v));
      if (v) spdlog::info("--init-from: the text is encoded with the checkpoint's vocabulary of {} bytes", v->size());
    } catch (const std::runtime_error& e) {
      throw UsageError(std::string("--data ") + c.data + ": " + e.what());
    }
  } else if (c.data == "fashion-mnist") {
    d.train = std::make_shared<const Dataset>(load_fashion_mnist(c.data_dir, true));
    d.test = std::make_shared<const Dataset>(load_fashion_mnist(c.data_dir, false));
  } else {
    d.train = std::make_shared<const Dataset>(make_synthetic(c.synthetic_train, c.seed, true));
    d.test = std::make_shared<const Dataset>(make_synthetic(c.synthetic_test, c.seed, false));
  }
  return d;
}

Device resolve_device(const TrainConfig& c) {
  if (c.device == DeviceKind::cpu) return Device::cpu();
  // Under srun, Slurm's GPU counts are checked against the tasks on this node before
  // CUDA is asked anything (a shortfall is a usage error, exit 2; collectives/slurm_env.h).
  std::optional<LaunchEnv> launch;
  if (c.mode == Mode::ddp) launch = read_launch_env();
  int slurm_index = -1;
  if (launch && launch->under_slurm) slurm_index = slurm::gpu_index(process_environment(), *launch);
  const int visible = cuda_device_count();
  if (visible == 0) {
    // Why, where the process cannot use CUDA at all: a build without it, or a CUDA build
    // whose plugin or a library it needs (libcudart, cuBLAS, NCCL) is missing.
    const std::string why = cuda::unavailable_reason();
    throw std::runtime_error("--device cuda: no CUDA GPU is visible to this process" +
                             (why.empty() ? std::string() : " (" + why + ")"));
  }
  int index = 0;
  if (c.mode == Mode::ddp) {
    index = slurm_index >= 0 ? slurm_index : launch->local_rank;
    // Host-staged backends (mpi, gloo, shm, hier) let several ranks share a GPU: wrap around. NCCL
    // needs one GPU per rank, so a LOCAL_RANK past the visible count is an error below.
    if (host_staged_backend(c)) index %= visible;
  }
  const bool dp = c.mode == Mode::dp;
  const int needed = dp ? c.devices : index + 1;
  if (needed > visible)
    throw std::runtime_error("--device cuda: " + std::string(dp ? "--devices " : "LOCAL_RANK ") +
                             std::to_string(dp ? c.devices : index) + " needs " + std::to_string(needed) +
                             " GPUs but " + std::to_string(visible) + " are visible");
  cuda::set_device(index);
  return Device::cuda(index);
}

ModelConfig model_config(const TrainConfig& c, const TrainData& data) {
  ModelConfig mc;
  mc.name = c.model;
  mc.hidden = c.hidden;
  if (data.text) {
    mc.in_channels = mc.height = mc.width = 0;
    mc.classes = data.text->vocab_size();
    mc.gpt = GptConfig{data.text->vocab_size(), c.n_layer, c.n_head, c.n_embd, c.context, c.dropout};
    mc.gpt.activation_checkpointing = c.activation_checkpointing;
    mc.gpt.attention = parse_attention_kernel(c.attention);
  } else {
    mc.in_channels = data.train->channels;
    mc.height = data.train->height;
    mc.width = data.train->width;
    mc.classes = data.train->classes;
    mc.resnet = ResNetConfig{c.depth, c.width, c.activation_checkpointing};
  }
  return mc;
}

OptimizerConfig optimizer_config(const TrainConfig& c) {
  OptimizerConfig oc;
  oc.kind = c.optimizer;
  oc.momentum = c.momentum;
  oc.nesterov = c.nesterov;
  oc.weight_decay = c.weight_decay;
  oc.beta1 = c.beta1;
  oc.beta2 = c.beta2;
  oc.clip_grad_norm = c.clip_grad_norm;
  return oc;
}

ParallelOptions parallel_options(const TrainConfig& c, Device device, int threads) {
  ParallelOptions po;
  po.mode = c.mode;
  po.device = device;
  po.devices = c.mode == Mode::dp ? c.devices : 1;
  po.backend = c.backend;
  po.timeout = std::chrono::milliseconds(static_cast<int64_t>(c.collective_timeout_s * 1000));
  po.bucket_cap_mb = c.bucket_cap_mb;
  po.first_bucket_mb = c.first_bucket_mb;
  po.bucket_cap_auto = c.bucket_cap_auto;
  po.overlap = !c.no_overlap;
  po.communicate = !c.no_comm;
  po.find_unused_parameters = c.find_unused_parameters;
  po.comm_hook = c.comm_hook;
  po.powersgd = c.powersgd;
  po.powersgd.seed = c.seed;
  po.precision = c.precision;
  po.cpu_threads = threads;
  po.zero_stage = c.zero;
  po.sync_batchnorm = c.sync_bn;
  po.broadcast_buffers = !c.no_broadcast_buffers;
  return po;
}

std::string bf16_gemm_name(const TrainConfig& c, Device device) {
  if (c.precision != Precision::bf16) return "";
  if (device.is_cuda()) return "cublas";
  return cpu::bf16_gemm_path() == cpu::Bf16GemmPath::native ? "native" : "fallback";
}

std::string apply_fp32_math(const TrainConfig& c, Device device) {
  if (!device.is_cuda()) return "fp32";  // --tf32 needs --device cuda (train_config.cpp)
  const bool dp = c.mode == Mode::dp;
  bool on = c.tf32;
  for (int d = 0; d < (dp ? c.devices : 1); ++d) on = cuda::kernels(dp ? d : device.index).set_tf32(c.tf32) && on;
  if (dp) cuda::set_device(device.index);  // setting the math made each device current in turn
  if (c.tf32 && !on)
    spdlog::warn("--tf32: this CUDA device has no TF32 mode (the emulated GPU): fp32 matrix products stay strict fp32");
  return on ? "tf32" : "fp32";
}

void run_sampling(const TrainConfig& c, Device device) {
  // stdout carries the sample alone: the log's info lines (stdout) are held back.
  if (spdlog::get_level() < spdlog::level::warn) spdlog::set_level(spdlog::level::warn);
  const std::string path = resolve_resume(c.resume, c.checkpoint_dir);
  if (path.empty()) throw UsageError("--sample: no checkpoint found to sample from (--resume " + c.resume + ")");
  const CheckpointMeta meta = read_checkpoint_meta(path);
  GptConfig config = gpt_config_from_meta(meta);
  config.attention = parse_attention_kernel(c.attention);  // not the checkpoint's: how to run, not what
  GptModel model(config, c.seed);
  model.to(device);
  load_checkpoint(path, model, nullptr);
  SampleOptions so;
  so.length = c.sample;
  so.temperature = c.temperature;
  so.seed = c.seed;
  so.prompt = c.prompt;
  std::string text;
  try {
    text = sample_text(model, vocab_from_meta(meta), so);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  std::fprintf(stderr, "tandem-train: %lld characters sampled from %s (step %lld), temperature %g, seed %llu\n",
               static_cast<long long>(c.sample), path.c_str(), static_cast<long long>(meta.step),
               static_cast<double>(c.temperature), static_cast<unsigned long long>(c.seed));
  std::fwrite(c.prompt.data(), 1, c.prompt.size(), stdout);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

}  // namespace tandem
