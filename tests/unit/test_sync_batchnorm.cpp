// Module buffers and SyncBatchNorm within one process: buffers' names, devices and
// checkpoints; DataParallel(2) with SyncBatchNorm equals single-process BatchNorm on the
// whole batch (gradients and running statistics within 1e-5 relative, as only the order
// of float additions differs); DataParallel without it keeps device 0's statistics, bit
// for bit those of BatchNorm over device 0's chunk; the replica-thread sum itself.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <thread>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/strategy/data_parallel.h"
#include "runtime/strategy/parallel.h"
#include "runtime/strategy/replica_sync.h"
#include "runtime/strategy/single.h"
#include "tests/support/bn_net.h"
#include "tests/support/temp_dir.h"

using namespace tandem;
using tandem::testing::bn_batch;
using tandem::testing::bn_net;
using tandem::testing::relative_error;

namespace {

std::vector<std::unique_ptr<Model>> replicas(int n) {
  std::vector<std::unique_ptr<Model>> out;
  for (int i = 0; i < n; ++i) out.push_back(bn_net());
  return out;
}

OptimizerConfig sgd() {
  OptimizerConfig oc;
  oc.momentum = 0.9f;
  return oc;
}

int64_t tracked(const Model& m, const std::string& bn) {
  return m.find_buffer(bn + ".num_batches_tracked")->value.data<int64_t>()[0];
}

}  // namespace

TEST(ModuleBuffers, NamesShapesAndDtypesFollowPyTorch) {
  auto m = bn_net();
  std::vector<std::string> names;
  for (const ModuleBuffer* b : m->buffers()) names.push_back(b->name);
  EXPECT_EQ(names, (std::vector<std::string>{"bn1.running_mean", "bn1.running_var", "bn1.num_batches_tracked",
                                             "bn2.running_mean", "bn2.running_var", "bn2.num_batches_tracked"}));
  EXPECT_EQ(m->find_buffer("bn1.running_var")->value.shape(), (Shape{4}));
  EXPECT_EQ(m->find_buffer("bn2.num_batches_tracked")->value.dtype(), DType::i64);
  EXPECT_EQ(m->find_buffer("bn2.num_batches_tracked")->value.shape(), (Shape{}));
  EXPECT_EQ(m->find_buffer("bn1.running_var")->value.to_vector(), std::vector<float>(4, 1.f));
  EXPECT_EQ(m->find_buffer("nope"), nullptr);
  // Buffers are not parameters: the reducer and the optimizer never see them.
  for (const Parameter* p : m->parameters()) EXPECT_EQ(p->name.find("running"), std::string::npos) << p->name;
}

TEST(ModuleBuffers, NameClashesAreRefused) {
  class Clash final : public Module {
   public:
    explicit Clash(int which) {
      add_parameter("w", {2});
      if (which == 0) add_buffer("w", {2});
      if (which == 1) add_buffer("b", {2}), add_buffer("b", {3});
    }
    std::string kind() const override { return "Clash"; }
    Tensor forward(const Tensor& x) override { return x; }
    Tensor backward(const Tensor& dy) override { return dy; }
  };
  EXPECT_THROW(Clash(0), std::invalid_argument);
  EXPECT_THROW(Clash(1), std::invalid_argument);
  EXPECT_NO_THROW(Clash(2));
}

TEST(ModuleBuffers, TrainingForwardsMoveTheRunningStatisticsAndEvaluationDoesNot) {
  auto m = bn_net();
  SingleStrategy s(bn_net(), sgd(), Device::cpu());
  s.forward_backward(bn_batch(0, 0, 8));
  s.step(0.1f);
  EXPECT_EQ(tracked(s.model(), "bn1"), 1);
  const std::string after_train = buffer_checksum(s.model());
  EXPECT_NE(after_train, buffer_checksum(*m));
  s.model().set_training(false);
  s.model().forward(bn_batch(5, 0, 8).inputs);
  s.model().set_training(true);
  EXPECT_EQ(buffer_checksum(s.model()), after_train);
}

TEST(ModuleBuffers, CheckpointsSaveAndRestoreThemBitIdentically) {
  tandem::testing::TempDir dir("tandem-buffers");
  SingleStrategy s(bn_net(), sgd(), Device::cpu());
  for (int64_t step = 0; step < 3; ++step) {
    s.forward_backward(bn_batch(step, 0, 8));
    s.step(0.1f);
  }
  CheckpointMeta meta;
  meta.step = 3;
  meta.model_name = "bn_net";
  const std::string path = save_checkpoint(dir.path().string(), s.model(), s.optimizer(), meta);
  SingleStrategy fresh(bn_net(), sgd(), Device::cpu());
  ASSERT_NE(buffer_checksum(fresh.model()), buffer_checksum(s.model()));
  load_checkpoint(path, fresh.model(), &fresh.optimizer());
  EXPECT_EQ(buffer_checksum(fresh.model()), buffer_checksum(s.model()));
  EXPECT_EQ(parameter_checksum(fresh.model()), parameter_checksum(s.model()));
  EXPECT_EQ(tracked(fresh.model(), "bn2"), 3);
  // Both continue identically, buffers included.
  s.forward_backward(bn_batch(3, 0, 8));
  s.step(0.1f);
  fresh.forward_backward(bn_batch(3, 0, 8));
  fresh.step(0.1f);
  EXPECT_EQ(buffer_checksum(fresh.model()), buffer_checksum(s.model()));
  EXPECT_EQ(parameter_checksum(fresh.model()), parameter_checksum(s.model()));

  // The same parameters without the buffers (a BatchNorm stand-in with weight and bias
  // only) are refused, naming the first buffer the model lacks, in name order.
  class AffineOnly final : public Module {
   public:
    explicit AffineOnly(int64_t c) { add_parameter("weight", {c}), add_parameter("bias", {c}); }
    std::string kind() const override { return "AffineOnly"; }
    Tensor forward(const Tensor& x) override { return x; }
    Tensor backward(const Tensor& dy) override { return dy; }
  };
  auto plain = std::make_unique<Model>();
  plain->add("conv", std::make_unique<Conv2d>(1, 4, 3, 1, 1, false));
  plain->add("bn1", std::make_unique<AffineOnly>(4));
  plain->add("fc1", std::make_unique<Linear>(100, 6, false));
  plain->add("bn2", std::make_unique<AffineOnly>(6));
  plain->add("fc2", std::make_unique<Linear>(6, 3));
  try {
    load_checkpoint(path, *plain, nullptr);
    FAIL() << "loaded into a model without the checkpoint's buffers";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'bn1.num_batches_tracked' in the checkpoint does not exist in this model"),
              std::string::npos)
        << e.what();
  }
}

TEST(SyncBatchNorm, DataParallelWithSyncEqualsSingleOnTheWholeBatch) {
  for (int devices : {2, 3}) {
    DataParallelStrategy dp(replicas(devices), sgd(), std::vector<Device>(devices, Device::cpu()));
    EXPECT_EQ(dp.set_sync_batchnorm(true), 2);
    SingleStrategy single(bn_net(), sgd(), Device::cpu());
    for (int64_t step = 0; step < 3; ++step) {
      const Batch b = bn_batch(step, 0, 12);
      const double l_dp = dp.forward_backward(b).loss(), l_single = single.forward_backward(b).loss();
      EXPECT_NEAR(l_dp, l_single, 1e-5 * std::fabs(l_single));
      for (size_t i = 0; i < single.model().parameters().size(); ++i) {
        const Parameter* p = dp.model().parameters()[i];
        EXPECT_LE(relative_error(p->grad, single.model().parameters()[i]->grad), 1e-5)
            << "DP(" << devices << ") step " << step << " " << p->name;
      }
      dp.step(0.1f);
      single.step(0.1f);
      for (const ModuleBuffer* b : single.model().buffers()) {
        const Tensor& got = dp.model().find_buffer(b->name)->value;
        if (b->value.dtype() == DType::i64)
          EXPECT_EQ(got.data<int64_t>()[0], b->value.data<int64_t>()[0]) << b->name;
        else
          EXPECT_LE(relative_error(got, b->value), 1e-5) << "DP(" << devices << ") step " << step << " " << b->name;
      }
    }
  }
}

TEST(SyncBatchNorm, DataParallelWithoutSyncKeepsDeviceZerosStatistics) {
  // torch.nn.DataParallel's behaviour: each replica normalises its own chunk, and device
  // 0's running statistics (from chunk 0) are the model's. Bit for bit: the same kernels
  // on the same chunk.
  DataParallelStrategy dp(replicas(2), sgd(), {Device::cpu(), Device::cpu()});
  auto shadow = bn_net();
  for (int64_t step = 0; step < 3; ++step) {
    for (size_t i = 0; i < shadow->parameters().size(); ++i)
      shadow->parameters()[i]->value.copy_from(dp.model().parameters()[i]->value);
    copy_buffers(*shadow, dp.model());
    shadow->forward(bn_batch(step, 0, 5).inputs);
    dp.forward_backward(bn_batch(step, 0, 10));
    dp.step(0.1f);
    EXPECT_EQ(buffer_checksum(dp.model()), buffer_checksum(*shadow)) << "step " << step;
  }
}

TEST(SyncBatchNorm, ReplicaThreadSumIsInReplicaOrderAndFailsFast) {
  auto all = std::make_shared<ThreadCrossReplicaSum>(3, std::chrono::seconds(60));
  std::vector<Tensor> v;
  for (int r = 0; r < 3; ++r) v.push_back(Tensor::from_vector({1e8f * (r == 0), 1.f * r, -1e8f * (r == 1)}, {3}));
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      auto me = all->participant(r);
      me->sum(v[r], "test sum");
    });
  for (auto& t : threads) t.join();
  // (1e8 + -1e8) + 2 in replica order, whatever the arrival order: exactly 2 (1e8 + 1 is 1e8 in f32).
  for (int r = 0; r < 3; ++r) EXPECT_EQ(v[r].to_vector(), (std::vector<float>{1e8f, 3.f, -1e8f}));

  // A replica that failed: the others do not wait for it.
  auto cancelled = std::make_shared<ThreadCrossReplicaSum>(2, std::chrono::seconds(600));
  std::string error;
  std::thread waiting([&] {
    Tensor t = Tensor::zeros({2});
    try {
      cancelled->participant(0)->sum(t, "bn1 forward statistics");
    } catch (const std::runtime_error& e) {
      error = e.what();
    }
  });
  cancelled->cancel("replica 1 failed: boom");
  waiting.join();
  EXPECT_NE(error.find("replica 1 failed: boom"), std::string::npos) << error;
}

TEST(SyncBatchNorm, RefusedWithJoinedUnevenInputs) {
  ParallelOptions o;
  o.mode = Mode::ddp;
  o.sync_batchnorm = true;
  o.uneven_inputs = UnevenInputs::join;
  try {
    parallelize([] { return bn_net(); }, sgd(), o);
    FAIL() << "sync_batchnorm with join was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("join"), std::string::npos) << e.what();
  }
}
