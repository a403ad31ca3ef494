// Downsample, BasicBlock and ResNetStage forward/backward: sub-modules in sequence, the
// residual sum, and the gradient through both branches of the sum.
#include "zoo/resnet_blocks.h"

#include <memory>
#include <stdexcept>

#include "runtime/kernels.h"
#include "runtime/layers/layer_util.h"

namespace tandem {

Downsample::Downsample(int64_t in_channels, int64_t out_channels, int64_t stride) {
  conv_ = &add_module("0", std::make_unique<Conv2d>(in_channels, out_channels, 1, stride, 0, /*bias=*/false));
  bn_ = &add_module("1", std::make_unique<BatchNorm>(BatchNormKind::d2, out_channels));
}

Tensor Downsample::forward(const Tensor& x) { return bn_->forward(conv_->forward(x)); }

Tensor Downsample::backward(const Tensor& dy) {
  conv_->set_needs_input_grad(needs_input_grad_);
  return backward_child(*conv_, backward_child(*bn_, dy));
}

BasicBlock::BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride) {
  if (in_channels <= 0 || out_channels <= 0 || stride <= 0)
    throw std::invalid_argument("BasicBlock: channels and stride must be positive, got in=" +
                                std::to_string(in_channels) + " out=" + std::to_string(out_channels) +
                                " stride=" + std::to_string(stride));
  // torchvision's registration order: conv1, bn1, relu, conv2, bn2, downsample.
  conv1_ = &add_module("conv1", std::make_unique<Conv2d>(in_channels, out_channels, 3, stride, 1, false));
  bn1_ = &add_module("bn1", std::make_unique<BatchNorm>(BatchNormKind::d2, out_channels));
  relu1_ = &add_module("relu1", std::make_unique<ReLU>());
  conv2_ = &add_module("conv2", std::make_unique<Conv2d>(out_channels, out_channels, 3, 1, 1, false));
  bn2_ = &add_module("bn2", std::make_unique<BatchNorm>(BatchNormKind::d2, out_channels));
  relu2_ = &add_module("relu2", std::make_unique<ReLU>());
  if (stride != 1 || in_channels != out_channels)
    downsample_ = &add_module("downsample", std::make_unique<Downsample>(in_channels, out_channels, stride));
}

Tensor BasicBlock::forward(const Tensor& x) {
  check_tensor(kind(), "input", x, device_);
  Kernels& k = kernels_for(device_);
  saved_ = false;
  const Tensor h = bn2_->forward(conv2_->forward(relu1_->forward(bn1_->forward(conv1_->forward(x)))));
  const Tensor shortcut = downsample_ ? downsample_->forward(x) : x;
  if (shortcut.shape() != h.shape())  // only an identity shortcut can disagree: a bad input
    throw_shape_error(kind(), "input", "(N, C, H, W) giving the block's output shape " + shape_str(h.shape()),
                      x.shape());
  // h += shortcut, in bn2's output buffer: BatchNorm keeps its input for backward, never its
  // output (batchnorm.h), and the final ReLU writes a buffer of its own.
  k.axpy(h.f32(), shortcut.f32(), h.numel(), 1.f);
  Tensor y = relu2_->forward(h);
  saved_ = training();
  return y;
}

Tensor BasicBlock::backward(const Tensor& dy) {
  check_saved(kind(), saved_);
  saved_ = false;
  const Tensor ds = backward_child(*relu2_, dy);  // the gradient of the sum, both branches'
  // Shortcut first: its parameters were registered last, so they are ready first.
  Tensor dshort = ds;
  if (downsample_) {
    downsample_->set_needs_input_grad(needs_input_grad_);
    dshort = backward_child(*downsample_, ds);
  }
  conv1_->set_needs_input_grad(needs_input_grad_);
  Tensor g = backward_child(*bn2_, ds);
  g = backward_child(*conv2_, g);
  g = backward_child(*relu1_, g);
  g = backward_child(*bn1_, g);
  Tensor dx = backward_child(*conv1_, g);
  if (!needs_input_grad_) return Tensor();
  // dx is conv1's own input-gradient buffer, which conv1 never reads: add the shortcut's there.
  kernels_for(device_).axpy(dx.f32(), dshort.f32(), dx.numel(), 1.f);
  return dx;
}

void BasicBlock::release_activations() {
  saved_ = false;
  Module::release_activations();
}

ResNetStage::ResNetStage(int64_t blocks, int64_t in_channels, int64_t out_channels, int64_t stride) {
  if (blocks <= 0) throw std::invalid_argument("ResNetStage: blocks must be positive, got " + std::to_string(blocks));
  for (int64_t i = 0; i < blocks; ++i)
    blocks_.push_back(&add_module(std::to_string(i), std::make_unique<BasicBlock>(i == 0 ? in_channels : out_channels,
                                                                                  out_channels, i == 0 ? stride : 1)));
}

Tensor ResNetStage::forward(const Tensor& x) {
  saved_ = false;
  Tensor h = x;
  for (BasicBlock* b : blocks_) h = b->forward(h);
  saved_ = training();
  return h;
}

Tensor ResNetStage::backward(const Tensor& dy) {
  check_saved(kind(), saved_);
  saved_ = false;
  blocks_.front()->set_needs_input_grad(needs_input_grad_);  // the stage's input is block 0's
  Tensor g = dy;
  for (size_t i = blocks_.size(); i-- > 0;) g = backward_child(*blocks_[i], g);
  return g;
}

void ResNetStage::release_activations() {
  saved_ = false;
  Module::release_activations();
}

}  // namespace tandem
