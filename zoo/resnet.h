// The ResNet of the zoo (--model resnet): He et al.'s CIFAR-style residual network of
// basic blocks with BatchNorm, for images of any channels and any size from 4x4
// (Fashion-MNIST's 1x28x28 by default). depth = 6n + 2 (ResNet-20: n = 3 blocks in each of
// three stages), width = the first stage's channels (16), doubled by the second and third
// stages, which also halve the spatial size (rounding up).
//
// Parameter and buffer names are torchvision's (conv1.weight, bn1.running_mean,
// layer1.0.conv1.weight, layer2.0.downsample.0.weight, layer2.0.downsample.1.bias, fc.weight),
// so model.safetensors loads into a torchvision-style module with load_state_dict
// (scripts/bench/resnet_torch.py). The layers the container lists are conv1, bn1, relu,
// layer1, layer2, layer3 (one ResNetStage each, zoo/resnet_blocks.h), avgpool and fc
// (zoo/resnet.cpp draws the table). ResNet-20, width 16, 1x28x28, 10 classes: 272,186
// parameters (272,474 with 3 input channels, torchvision's CIFAR count).
#pragma once

#include <cstdint>
#include <memory>

#include "tandem/runtime/model.h"

namespace tandem {

struct ResNetConfig {
  int64_t depth = 20;  // 6n + 2
  int64_t width = 16;  // channels of the first stage
  // Recompute each stage's activations in backward instead of keeping them
  // (runtime/layers/activation_checkpoint.h).
  bool activation_checkpointing = false;
};

// Throws std::invalid_argument naming the flag at fault (--depth not of the form 6n + 2, ...).
void check_resnet_config(const ResNetConfig& config);

// The model for images (in_channels, height, width) and `classes` outputs, initialised
// from the seed as torchvision initialises its ResNets (zoo/resnet.cpp). The images must
// be at least 4x4 (layer2 and layer3 each halve them); checks the config first.
std::unique_ptr<Model> build_resnet(const ResNetConfig& config, int64_t in_channels, int64_t height,
                                    int64_t width, int64_t classes, uint64_t seed);

}  // namespace tandem
