// Contrastive multi-process test worker (runtime/layers/info_nce.h over
// runtime/layers/gather.h): run under mpirun or spawn_local.sh like ddp_worker; exits 0
// only if every check holds on this rank.
//   contrastive  a two-tower model over two views, InfoNCE with every rank's rows as
//                negatives (q -> k, then CLIP's symmetric form). Each rank trains DDP on
//                its contiguous share of a deterministic global batch of R*4 rows and, in
//                the same process, a single-process replica on the whole batch; for 3
//                steps of momentum SGD: every parameter's DDP gradient equals the single
//                one within 1e-5 relative per tensor (max|a - b| / max|b|), the loss
//                averaged over ranks equals the single loss within 1e-5 relative, and the
//                parameters stay within 1e-5. Then ranks holding different row counts are
//                refused on every rank with a message naming each rank's count.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/kernels.h"
#include "runtime/layers/activation.h"
#include "runtime/layers/info_nce.h"
#include "runtime/layers/linear.h"
#include "runtime/layers/gather.h"
#include "runtime/strategy/parallel.h"
#include "tests/ddp/scenario_main.h"
#include "tests/support/two_views.h"
#include "tests/support/compare.h"

using namespace tandem;

namespace {

int g_rank = 0;

void check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("check failed: " + what);
}

constexpr int64_t kRows = 4, kIn = 6;

using tandem::testing::TwoViews;

// Global batch `step` of `rows` two-view samples (N, 2, 6), the same on every rank; no labels.
std::vector<float> global_inputs(int64_t step, int64_t rows) {
  std::vector<float> x(rows * 2 * kIn);
  uint64_t s = 0x9e3779b97f4a7c15ull * (step + 1);
  for (float& v : x) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<float>((s >> 40) % 2001) / 1000.0f - 1.0f;
  }
  return x;
}

// Rows [first, first + rows) of the global inputs.
Batch batch_of(const std::vector<float>& all, int64_t first, int64_t rows) {
  const int64_t per = 2 * kIn;
  Batch b;
  b.inputs = Tensor::from_vector(std::vector<float>(all.begin() + first * per, all.begin() + (first + rows) * per),
                                 {rows, 2, kIn});
  return b;
}

using tandem::testing::relative_difference;

void equals_single(const std::shared_ptr<ProcessGroup>& pg, bool symmetric) {
  const int world = pg->size(), rank = pg->rank();
  const char* form = symmetric ? "symmetric" : "q_to_k";
  const LossFactory make_loss = [symmetric](const LossContext& ctx) {
    return std::make_unique<InfoNce>(ctx.group, InfoNceOptions{0.2f, symmetric});
  };
  OptimizerConfig oc;
  oc.momentum = 0.9f;
  ParallelOptions ddp_options;
  ddp_options.mode = Mode::ddp;
  ddp_options.group = pg;
  ddp_options.cpu_threads = 1;
  ddp_options.bucket_cap_mb = 0.0005;  // ~500 B: several buckets for the 176 parameters (704 B)
  ddp_options.loss = make_loss;
  ParallelOptions single_options;
  single_options.cpu_threads = 1;
  single_options.loss = make_loss;
  const ModelFactory make_model = [] { return std::make_unique<TwoViews>(); };
  auto ddp = parallelize(make_model, oc, ddp_options);
  auto single = parallelize(make_model, oc, single_options);

  double worst_grad = 0, worst_loss = 0;
  for (int64_t step = 0; step < 3; ++step) {
    const std::vector<float> all = global_inputs(step, world * kRows);
    const double local = ddp->forward_backward(batch_of(all, rank * kRows, kRows)).loss();
    const double averaged = ddp->global_loss(local);
    const double reference = single->forward_backward(batch_of(all, 0, world * kRows)).loss();
    const double loss_err = std::fabs(averaged - reference) / std::max(1e-6, std::fabs(reference));
    worst_loss = std::max(worst_loss, loss_err);
    check(loss_err <= 1e-5, std::string(form) + " step " + std::to_string(step) + ": loss averaged over ranks " +
                                std::to_string(averaged) + " vs single " + std::to_string(reference));
    const auto& dp = ddp->model().parameters();
    const auto& sp = single->model().parameters();
    for (size_t i = 0; i < dp.size(); ++i) {
      const double e = relative_difference(dp[i]->grad, sp[i]->grad);
      worst_grad = std::max(worst_grad, e);
      check(e <= 1e-5, std::string(form) + " step " + std::to_string(step) + ": " + dp[i]->name +
                           " gradient relative error " + std::to_string(e) + " on rank " + std::to_string(g_rank));
    }
    ddp->step(0.1f);
    single->step(0.1f);
  }
  const double params = tandem::testing::max_relative_difference(ddp->model(), single->model());
  check(params <= 1e-5, std::string(form) + ": parameters after 3 steps differ by " + std::to_string(params));
  if (rank == 0)
    std::printf("%s at %d ranks: max gradient relative error %.3g, loss %.3g, parameters %.3g\n", form, world,
                worst_grad, worst_loss, params);
}

void refuses_uneven_rows(const std::shared_ptr<ProcessGroup>& pg) {
  // Rank 0 holds one row more; every rank throws, naming each rank's count.
  InfoNce loss(pg);
  const int64_t rows = kRows + (pg->rank() == 0 ? 1 : 0);
  const std::vector<Tensor> outs = {Tensor::zeros({rows, 4}), Tensor::zeros({rows, 4})};
  std::string message;
  try {
    loss.forward(outs, {});
  } catch (const std::invalid_argument& e) {
    message = e.what();
  }
  std::string counts = std::to_string(kRows + 1) + " (4)";
  for (int r = 1; r < pg->size(); ++r) counts += ", " + std::to_string(kRows) + " (4)";
  check(message.find(counts) != std::string::npos, "uneven rows: expected a message naming " + counts + ", got '" +
                                                       message + "'");
}

void contrastive(std::shared_ptr<ProcessGroup> pg) {
  equals_single(pg, false);
  equals_single(pg, true);
  refuses_uneven_rows(pg);
}

}  // namespace

int main(int argc, char** argv) {
  const std::map<std::string, Scenario> scenarios = {{"contrastive", contrastive}};
  return run_scenario_main(argc, argv, "contrastive_worker", scenarios, g_rank);
}
