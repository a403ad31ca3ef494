// Helpers every layer shares: input checks that name the layer and the expected shape,
// reuse of a layer's own buffers across steps, and parameter initialisation that works
// on any device.
// Invariant: reuse_buffer hands back a cached buffer only when the layer holds the sole
// reference to it (nobody else can observe the overwrite); otherwise it allocates.
#pragma once

#include <cstdint>
#include <string>

#include "tandem/runtime/module.h"
#include "tandem/runtime/tensor.h"

namespace tandem {

// Throws std::invalid_argument "<kind>: <what> must be <expected>, got <shape>".
[[noreturn]] void throw_shape_error(const std::string& kind, const std::string& what,
                                    const std::string& expected, const Shape& got);

// x is defined, f32, and on `device` (the layer's parameter device).
void check_tensor(const std::string& kind, const std::string& what, const Tensor& x, Device device);

// Throws std::logic_error when backward runs without a forward that saved its state.
void check_saved(const std::string& kind, bool saved);

// `cache` when it already has this shape, dtype and device and nobody else references
// its storage; a fresh buffer otherwise (which then becomes the cache). Contents are
// unspecified: callers overwrite every element.
Tensor reuse_buffer(Tensor& cache, const Shape& shape, Device device, DType dtype = DType::f32);

// Parameter::grad as a raw pointer, checked to match the value's element count and
// device (grad may have been rebound to a view into a bucket buffer).
float* grad_ptr(Parameter& p);

// U(-bound, bound) from parameter_rng(seed, p.name), copied to p.value's device.
void init_uniform(Parameter& p, uint64_t seed, float bound);
void init_constant(Parameter& p, float value);
// N(0, std^2) from parameter_rng(seed, p.name) by Box-Muller on 53-bit uniforms (not
// std::normal_distribution, whose algorithm differs between standard libraries).
void init_normal(Parameter& p, uint64_t seed, float std);

}  // namespace tandem
