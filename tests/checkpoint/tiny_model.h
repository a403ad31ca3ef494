// Small models with non-trivial optimizer state, shared by the checkpoint unit tests and the
// helper programs of tests/checkpoint/. Built from runtime layers only (the unit binary does
// not link the model zoo); names follow the zoo's ("fc1.weight", ...).
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "runtime/layers/activation.h"
#include "runtime/layers/linear.h"
#include "runtime/model.h"
#include "runtime/optim/optimizer.h"

namespace tandem::test {

// in -> fc1 -> ReLU -> fc2 -> ... -> fc<layers>; every hidden width is `hidden`.
inline std::unique_ptr<Model> make_mlp(int64_t in, int64_t hidden, int64_t out, uint64_t seed, int layers = 2) {
  auto model = std::make_unique<Model>();
  for (int i = 1; i <= layers; ++i) {
    const int64_t a = i == 1 ? in : hidden, b = i == layers ? out : hidden;
    model->add("fc" + std::to_string(i), std::make_unique<Linear>(a, b));
    if (i < layers) model->add("act" + std::to_string(i), std::make_unique<ReLU>());
  }
  model->reset_parameters(seed);
  return model;
}

// Sets every gradient to seeded pseudo-random values (the same for the same seed and name).
inline void fill_grads(Model& model, uint64_t seed) {
  for (Parameter* p : model.parameters()) {
    std::mt19937_64 rng = parameter_rng(seed, p->name);
    std::vector<float> g(static_cast<size_t>(p->grad.numel()));
    fill_uniform(g, rng, 1.0f);
    p->grad.copy_from(Tensor::from_vector(g, p->grad.shape()));
  }
}

// `steps` optimizer steps with pseudo-random gradients, so every state tensor is nonzero.
inline void train_steps(Model& model, Optimizer& optimizer, int steps, uint64_t seed) {
  for (int s = 0; s < steps; ++s) {
    fill_grads(model, seed * 1000 + static_cast<uint64_t>(optimizer.steps_taken()));
    optimizer.step(0.01f);
  }
}

}  // namespace tandem::test
