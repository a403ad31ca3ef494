// GlobalAvgPool: the mean of each channel over its H x W plane, flattened, as
// torch.nn.AdaptiveAvgPool2d(1) followed by torch.flatten(x, 1): x (N, C, H, W) -> y (N, C).
// A ResNet's head (zoo/resnet.h, the layer "avgpool"), no parameters.
// Invariant: forward keeps only the input's shape; backward spreads dy[n, c] / (H*W) evenly
// over the plane (N, C, H, W), so the layer never holds an activation between the two.
#pragma once

#include <string>

#include "tandem/runtime/module.h"

namespace tandem {

class GlobalAvgPool final : public Module {
 public:
  std::string kind() const override { return "GlobalAvgPool"; }
  // x (N, C, H, W) -> y (N, C), y[n, c] = sum over the plane / (H*W).
  Tensor forward(const Tensor& x) override;
  // dy (N, C) -> dx (N, C, H, W), dx[n, c, h, w] = dy[n, c] / (H*W).
  Tensor backward(const Tensor& dy) override;
  void release_activations() override;

 private:
  bool saved_ = false;
  Shape x_shape_;  // (N, C, H, W)
  Device device_of_x_ = Device::cpu();
  Tensor y_cache_, dx_cache_;
  Tensor dy_scaled_;  // (N, C): dy / (H*W), broadcast over each plane
};

}  // namespace tandem
