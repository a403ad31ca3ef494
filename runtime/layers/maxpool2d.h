// MaxPool2d: max over k x k windows of each NCHW plane, no padding, floor output size,
// as torch.nn.MaxPool2d(kernel_size, stride).
// Invariant: backward routes each output gradient to the one input element forward
// chose (the first maximum of its window), recorded as i32 flat h*W+w indices.
#pragma once

#include <cstdint>
#include <string>

#include "tandem/runtime/module.h"

namespace tandem {

class MaxPool2d final : public Module {
 public:
  // stride 0 means stride = kernel_size (PyTorch's default).
  explicit MaxPool2d(int64_t kernel_size, int64_t stride = 0);
  std::string kind() const override { return "MaxPool2d"; }
  // x (N, C, H, W) -> y (N, C, (H-k)/stride + 1, (W-k)/stride + 1)
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  void release_activations() override;

 private:
  int64_t k_, stride_;
  bool saved_ = false;
  Shape x_shape_;
  Tensor argmax_;  // (N, C, OH, OW) i32, layer-owned and reused across steps
  Tensor y_cache_, dx_cache_;
};

}  // namespace tandem
