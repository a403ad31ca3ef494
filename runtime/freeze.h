// Freezing parameters for fine-tuning: PyTorch's requires_grad_(False), by name or glob.
//
// A frozen parameter (Parameter::requires_grad false, runtime/module.h) keeps its value:
// its layer skips the weight-gradient products, the DDP reducer leaves it out of every
// bucket (nothing is all-reduced for it), ZeRO does not shard it, and optimizers hold no
// state for it and never step it, so checkpoints have no optimizer state for it.
//
// When to freeze: strategies read requires_grad once, when parallelize() builds them
// (the reducer's buckets, the optimizer's state). The supported way is inside the model
// factory given to parallelize(), before it returns the model:
//
//   auto strategy = parallelize([&] {
//     auto model = build_model(config, seed);
//     load_weights(pretrained_dir, *model, {"head.*"});  // runtime/checkpoint/checkpoint.h
//     freeze_parameters(*model, {"embed.*", "blocks.0.*"});
//     return model;
//   }, optimizer, options);
//
// Changing requires_grad on a model a strategy already holds is not supported (the
// optimizer would keep or lack state and the buckets would not change). Every DDP rank
// must freeze the same parameters (the factory runs on each).
#pragma once

#include <string>
#include <vector>

#include "tandem/runtime/model.h"

namespace tandem {

// fnmatch(3)-style match of a whole parameter name: '*' any run of characters (dots
// included: "blocks.*.attn.*"), '?' one character, [abc] one of a set.
bool glob_match(const std::string& pattern, const std::string& name);
// True when any of `patterns` matches `name`.
bool matches_any(const std::vector<std::string>& patterns, const std::string& name);

// Sets requires_grad = value on every parameter whose name matches one of `patterns`
// (exact names or globs). Returns how many parameters matched (each counted once).
// A pattern that matches no parameter throws std::invalid_argument naming it and listing
// some of the model's parameter names, and then nothing is changed.
int set_requires_grad(Model& model, const std::vector<std::string>& patterns, bool value);
inline int freeze_parameters(Model& model, const std::vector<std::string>& patterns) {
  return set_requires_grad(model, patterns, false);
}
inline int unfreeze_parameters(Model& model, const std::vector<std::string>& patterns) {
  return set_requires_grad(model, patterns, true);
}

// Names of the frozen parameters, in registration order.
std::vector<std::string> frozen_parameter_names(const Model& model);
// Elements of the parameters that train (requires_grad true).
int64_t trainable_parameter_count(const Model& model);

// "a, b, c, ... (N in all)": the first `limit` names, for error messages.
std::string list_names(const std::vector<std::string>& names, size_t limit = 8);

}  // namespace tandem
