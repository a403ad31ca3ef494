// ResNet model construction and torchvision's initialisation.
// Layers, as the container lists them (parameter names in brackets):
//   conv1    Conv2d in_channels -> width, 3x3, pad 1, no bias   [conv1.weight]
//   bn1      BatchNorm2d (width)                               [bn1.weight, bn1.bias; buffers]
//   relu
//   layer1   ResNetStage: n blocks, width -> width             [layer1.0.conv1.weight, ...]
//   layer2   ResNetStage: n blocks, -> 2 width, stride 2       [..., layer2.0.downsample.0.weight]
//   layer3   ResNetStage: n blocks, -> 4 width, stride 2
//   avgpool  GlobalAvgPool (N, 4 width, H/4, W/4) -> (N, 4 width)
//   fc       Linear (4 width -> classes)                       [fc.weight, fc.bias]
// With --activation-checkpointing each stage is wrapped (names unchanged).
#include "zoo/resnet.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "zoo/resnet_blocks.h"
#include "runtime/layers/activation.h"
#include "runtime/layers/activation_checkpoint.h"
#include "runtime/layers/batchnorm.h"
#include "runtime/layers/conv2d.h"
#include "runtime/layers/global_avg_pool.h"
#include "runtime/layers/layer_util.h"
#include "runtime/layers/linear.h"

namespace tandem {

namespace {

class ResNetModel final : public Model {
 public:
  // torchvision's ResNet init: every conv weight ~ N(0, 2 / fan_out), fan_out = OC*k*k
  // (kaiming_normal_, mode 'fan_out', ReLU gain); BatchNorm weight 1, bias 0 and fresh
  // running statistics; fc as torch.nn.Linear (U(-1/sqrt(in), 1/sqrt(in))). Each draw
  // depends on (seed, name) only.
  void reset_parameters(uint64_t seed) override {
    Model::reset_parameters(seed);  // BatchNorm, fc, and conv weights to be redrawn below
    for (size_t i = 0; i < layer_count(); ++i)
      layer(i).visit([seed](Module& m) {
        if (m.kind() != "Conv2d") return;
        Parameter& w = *m.own_parameters().front();  // (OC, C, k, k)
        const int64_t fan_out = w.value.dim(0) * w.value.dim(2) * w.value.dim(3);
        init_normal(w, seed, std::sqrt(2.f / static_cast<float>(fan_out)));
      });
  }
};

}  // namespace

void check_resnet_config(const ResNetConfig& c) {
  if (c.depth < 8 || (c.depth - 2) % 6 != 0)
    throw std::invalid_argument("--depth must be 6n + 2 (8, 14, 20, 32, ...), got " + std::to_string(c.depth));
  if (c.width <= 0) throw std::invalid_argument("--width must be positive, got " + std::to_string(c.width));
}

std::unique_ptr<Model> build_resnet(const ResNetConfig& config, int64_t in_channels, int64_t height,
                                    int64_t width, int64_t classes, uint64_t seed) {
  check_resnet_config(config);
  if (in_channels <= 0 || classes <= 0)
    throw std::invalid_argument("resnet: the data's channels and classes must be positive, got " +
                                std::to_string(in_channels) + " channels and " + std::to_string(classes) +
                                " classes");
  // layer2 and layer3 each halve the image (rounding up); below 4x4 the last one would
  // have no pixel to halve.
  if (height < 4 || width < 4)
    throw std::invalid_argument("resnet: images must be at least 4x4 (layer2 and layer3 each halve them), got " +
                                std::to_string(height) + "x" + std::to_string(width));
  const int64_t n = (config.depth - 2) / 6, w = config.width;
  auto stage = [&](int64_t in, int64_t out, int64_t stride) -> std::unique_ptr<Module> {
    auto s = std::make_unique<ResNetStage>(n, in, out, stride);
    if (config.activation_checkpointing) return std::make_unique<ActivationCheckpoint>(std::move(s));
    return s;
  };
  auto m = std::make_unique<ResNetModel>();
  m->add("conv1", std::make_unique<Conv2d>(in_channels, w, 3, 1, 1, /*bias=*/false));
  m->add("bn1", std::make_unique<BatchNorm>(BatchNormKind::d2, w));
  m->add("relu", std::make_unique<ReLU>());
  m->add("layer1", stage(w, w, 1));
  m->add("layer2", stage(w, 2 * w, 2));
  m->add("layer3", stage(2 * w, 4 * w, 2));
  m->add("avgpool", std::make_unique<GlobalAvgPool>());
  m->add("fc", std::make_unique<Linear>(4 * w, classes));
  m->reset_parameters(seed);
  return m;
}

}  // namespace tandem
