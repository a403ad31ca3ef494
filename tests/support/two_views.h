// A two-tower test model for InfoNCE (tests/unit/test_info_nce.cpp, tests/ddp/contrastive_worker.cpp):
// two outputs from one input, so the loss seam's several-outputs path is exercised.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/kernels.h"
#include "runtime/layers/activation.h"
#include "runtime/layers/linear.h"
#include "runtime/model.h"

namespace tandem::testing {

// Two towers over two views held side by side in the input (N, 2, 6): q = tower_q(view 0),
// k = tower_k(view 1), each Linear(6, 8) -> ReLU -> Linear(8, 4, no bias). (A bias on the
// last layer would add one vector to every k (or q) row, which shifts all the logits of a
// row alike; softmax ignores that, so its gradient is 0 up to rounding, and a relative
// comparison of it would compare rounding noise.)
class TwoViews final : public Model {
 public:
  TwoViews() {
    for (const char* t : {"q", "k"}) {
      const std::string tower = t;
      add(tower + "_fc1", std::make_unique<Linear>(6, 8));
      add(tower + "_relu", std::make_unique<ReLU>());
      add(tower + "_fc2", std::make_unique<Linear>(8, 4, false));
    }
    reset_parameters(7);
  }
  std::vector<Tensor> forward_outputs(const Tensor& x) override {
    const int64_t n = x.dim(0), d = x.dim(2);
    Tensor views = Tensor::empty({2, n, d}, DType::f32, x.device());
    kernels_for(x.device()).swap_leading(views.f32(), x.f32(), n, 2, d);
    return {tower_forward(0, views.view(0, {n, d})), tower_forward(3, views.view(n * d, {n, d}))};
  }
  Tensor backward_outputs(std::span<const Tensor> douts) override {
    // The k tower was registered last: its gradients are ready first.
    tower_backward(3, douts[1]);
    tower_backward(0, douts[0]);
    return Tensor();
  }

 private:
  Tensor tower_forward(size_t first, Tensor h) {
    for (size_t i = first; i < first + 3; ++i) h = layer(i).forward(h);
    return h;
  }
  void tower_backward(size_t first, Tensor g) {
    for (size_t i = first + 3; i-- > first;) {
      g = layer(i).backward(g);
      fire_grad_ready(layer(i));
    }
  }
};

}  // namespace tandem::testing
