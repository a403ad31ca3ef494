// A test model with a branch taken by step parity: on even steps the input goes
// through `even`, on odd steps through `odd`, so each step leaves one branch's
// parameters without a gradient (DDP's unused-parameter case).
//   fc_in 16x8 -> ReLU -> (even: 8x8 | odd: 8x8) -> fc_out 8x4
#pragma once

#include <memory>

#include "runtime/layers/activation.h"
#include "runtime/layers/linear.h"
#include "runtime/model.h"

namespace tandem::testing {

class BranchModel final : public Model {
 public:
  BranchModel() {
    add("fc_in", std::make_unique<Linear>(16, 8));
    add("relu", std::make_unique<ReLU>());
    add("even", std::make_unique<Linear>(8, 8));
    add("odd", std::make_unique<Linear>(8, 8));
    add("fc_out", std::make_unique<Linear>(8, 4));
  }
  void set_step(int64_t step) { step_ = step; }

  Tensor forward(const Tensor& x) override {
    Tensor h = layer(1).forward(layer(0).forward(x));
    h = branch().forward(h);
    return layer(4).forward(h);
  }
  Tensor backward(const Tensor& dy) override {
    Tensor g = layer(4).backward(dy);
    fire_grad_ready(layer(4));
    g = branch().backward(g);
    fire_grad_ready(branch());
    g = layer(1).backward(g);
    g = layer(0).backward(g);
    fire_grad_ready(layer(0));
    return g;
  }

 private:
  Module& branch() { return layer(step_ % 2 == 0 ? 2 : 3); }
  int64_t step_ = 0;
};

}  // namespace tandem::testing
