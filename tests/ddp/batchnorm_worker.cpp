// BatchNorm multi-process test worker (runtime/layers/batchnorm.h, runtime/strategy/
// replica_sync.h): run under mpirun or spawn_local.sh like ddp_worker; exits 0 only if
// every check holds on this rank.
//   syncbn   DDP with SyncBatchNorm on each rank's contiguous share of a deterministic
//            global batch of R*4 rows, and in the same process a single-process replica
//            with plain BatchNorm on the whole batch; for 3 steps of momentum SGD: every
//            gradient within 1e-5 relative per tensor (max|a - b| / max|b|), every running
//            statistic within 1e-5 and num_batches_tracked equal, and every rank's
//            parameters and buffers bit-identical to rank 0's (replicas_identical).
//   buffers  DDP with plain BatchNorm. Broadcast on (the default): after every step each
//            rank's buffers are bit for bit those a local copy of the model computes from
//            rank 0's share alone (rank 0's buffers, broadcast), on every rank. Broadcast
//            off: each rank's are those of its own share, and ranks differ.
#include <cstdio>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>

#include "runtime/strategy/ddp.h"
#include "runtime/strategy/parallel.h"
#include "runtime/strategy/replica_sync.h"
#include "tests/ddp/scenario_main.h"
#include "tests/support/bn_net.h"

using namespace tandem;
using tandem::testing::bn_batch;
using tandem::testing::bn_net;
using tandem::testing::relative_error;

namespace {

int g_rank = 0;
constexpr int64_t kRows = 4;

void check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("check failed on rank " + std::to_string(g_rank) + ": " + what);
}

OptimizerConfig sgd() {
  OptimizerConfig oc;
  oc.momentum = 0.9f;
  return oc;
}

ParallelOptions ddp_options(const std::shared_ptr<ProcessGroup>& pg) {
  ParallelOptions o;
  o.mode = Mode::ddp;
  o.group = pg;
  o.cpu_threads = 1;
  o.bucket_cap_mb = 0.001;  // ~1 KB: several buckets in flight while the BatchNorms all-reduce
  return o;
}

void syncbn(std::shared_ptr<ProcessGroup> pg) {
  const int world = pg->size(), rank = pg->rank();
  ParallelOptions o = ddp_options(pg);
  o.sync_batchnorm = true;
  auto ddp = parallelize([] { return bn_net(); }, sgd(), o);
  ParallelOptions so;
  so.cpu_threads = 1;
  auto single = parallelize([] { return bn_net(); }, sgd(), so);
  double worst = 0;
  for (int64_t step = 0; step < 3; ++step) {
    ddp->forward_backward(bn_batch(step, rank * kRows, kRows));
    single->forward_backward(bn_batch(step, 0, world * kRows));
    const auto& dp = ddp->model().parameters();
    const auto& sp = single->model().parameters();
    for (size_t i = 0; i < dp.size(); ++i) {
      const double e = relative_error(dp[i]->grad, sp[i]->grad);
      worst = std::max(worst, e);
      check(e <= 1e-5, "step " + std::to_string(step) + ": " + dp[i]->name + " gradient relative error " +
                           std::to_string(e));
    }
    ddp->step(0.1f);
    single->step(0.1f);
    for (const ModuleBuffer* b : single->model().buffers()) {
      const Tensor& got = ddp->model().find_buffer(b->name)->value;
      if (b->value.dtype() == DType::i64) {
        check(got.data<int64_t>()[0] == b->value.data<int64_t>()[0], b->name + " differs");
        continue;
      }
      const double e = relative_error(got, b->value);
      worst = std::max(worst, e);
      check(e <= 1e-5, "step " + std::to_string(step) + ": " + b->name + " relative error " + std::to_string(e));
    }
    check(ddp->replicas_identical(), "step " + std::to_string(step) + ": ranks' parameters or buffers differ");
  }
  if (rank == 0) std::printf("syncbn at %d ranks: max relative error %.3g\n", world, worst);
}

// The model's parameters and buffers, copied into `shadow`.
void copy_state(Model& shadow, Model& from) {
  for (size_t i = 0; i < shadow.parameters().size(); ++i)
    shadow.parameters()[i]->value.copy_from(from.parameters()[i]->value);
  copy_buffers(shadow, from);
}

void buffers(std::shared_ptr<ProcessGroup> pg) {
  const int world = pg->size(), rank = pg->rank();
  for (bool broadcast : {true, false}) {
    ParallelOptions o = ddp_options(pg);
    o.broadcast_buffers = broadcast;
    auto ddp = parallelize([] { return bn_net(); }, sgd(), o);
    auto shadow = bn_net();
    for (int64_t step = 0; step < 3; ++step) {
      // What the buffers must become: the model as it enters the step, forwarded on the
      // share whose statistics win (rank 0's when broadcast, else this rank's).
      copy_state(*shadow, ddp->model());
      shadow->forward(bn_batch(step, (broadcast ? 0 : rank) * kRows, kRows).inputs);
      ddp->forward_backward(bn_batch(step, rank * kRows, kRows));
      ddp->step(0.1f);
      const std::string mine = buffer_checksum(ddp->model());
      check(mine == buffer_checksum(*shadow), std::string(broadcast ? "broadcast" : "no broadcast") + " step " +
                                                  std::to_string(step) + ": buffers are not the expected share's");
      const std::vector<int64_t> all = ddp->per_rank(static_cast<int64_t>(std::stoull(mine, nullptr, 16)));
      for (int r = 1; r < world; ++r)
        check((all[r] == all[0]) == broadcast, std::string(broadcast ? "broadcast" : "no broadcast") + " step " +
                                                   std::to_string(step) + ": rank " + std::to_string(r) +
                                                   (broadcast ? "'s buffers differ from rank 0's"
                                                              : "'s buffers equal rank 0's"));
    }
    check(ddp->replicas_identical(), "parameters differ across ranks");
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::map<std::string, Scenario> scenarios = {{"syncbn", syncbn}, {"buffers", buffers}};
  return run_scenario_main(argc, argv, "batchnorm_worker", scenarios, g_rank);
}
