// The residual parts of the zoo's ResNet (zoo/resnet.h), as modules made of sub-modules,
// named as torchvision's so a state dict loads either way:
//   Downsample:  "0" Conv2d 1x1 stride s (no bias) -> "1" BatchNorm2d      (the projection
//                shortcut, option B of He et al.: only where the shape changes)
//   BasicBlock:  y = relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)), conv1 3x3 stride s,
//                conv2 3x3, convs without bias; shortcut = downsample(x) or x itself
//   ResNetStage: blocks "0", "1", ... in sequence; only block 0 may stride or widen
// so a stage's parameters are layer2.0.conv1.weight, layer2.0.downsample.1.running_mean, ...
// Invariant: every sub-module's parameters are reported ready as soon as its own backward
// returns (Module::backward_child): the shortcut's first (they were registered last), then
// the main branch from bn2 down to conv1, so the DDP reducer's reverse-order buckets fill in
// order. A block never writes into a buffer a sub-module may read again: the residual sum
// goes into bn2's output (BatchNorm keeps its input, not its output), the input-gradient
// sum into the buffer conv1's backward returned (which conv1 never reads).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/layers/activation.h"
#include "runtime/layers/batchnorm.h"
#include "runtime/layers/conv2d.h"
#include "runtime/module.h"

namespace tandem {

class Downsample final : public Module {
 public:
  Downsample(int64_t in_channels, int64_t out_channels, int64_t stride);
  std::string kind() const override { return "Downsample"; }
  // x (N, C, H, W) -> (N, OC, OH, OW), OH = (H - 1) / stride + 1.
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;

 private:
  Conv2d* conv_;
  BatchNorm* bn_;
};

class BasicBlock final : public Module {
 public:
  // A downsample shortcut when stride != 1 or in_channels != out_channels.
  BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride);
  std::string kind() const override { return "BasicBlock"; }
  // x (N, C, H, W) -> (N, OC, OH, OW), OH = (H - 1) / stride + 1.
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  // Keeps no tensor itself: its sub-modules release theirs.
  void release_activations() override;

 private:
  Conv2d* conv1_;
  BatchNorm* bn1_;
  ReLU* relu1_;  // torchvision applies one self.relu twice; a ReLU keeps its output, so two
  Conv2d* conv2_;
  BatchNorm* bn2_;
  ReLU* relu2_;
  Downsample* downsample_ = nullptr;  // null: the identity shortcut
  bool saved_ = false;
};

class ResNetStage final : public Module {
 public:
  // `blocks` BasicBlocks; the first maps in_channels -> out_channels with `stride`.
  ResNetStage(int64_t blocks, int64_t in_channels, int64_t out_channels, int64_t stride);
  std::string kind() const override { return "ResNetStage"; }
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  void release_activations() override;  // the blocks'

 private:
  std::vector<BasicBlock*> blocks_;
  bool saved_ = false;
};

}  // namespace tandem
