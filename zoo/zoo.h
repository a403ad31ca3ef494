// The model zoo. Each builder returns a Model with deterministic parameters for a seed;
// parameter names are the layer names below (fc1.weight, conv2.bias, ...).
//   mlp: Flatten -> fc1 784xH -> ReLU -> fc2 HxH -> ReLU -> fc3 Hx10
//   cnn: conv1 1->32 3x3 p1 -> ReLU -> pool 2 -> conv2 32->64 3x3 p1 -> ReLU -> pool 2
//        -> Flatten -> fc1 3136x48 -> ReLU -> fc2 48x10            (169,882 parameters)
//   resnet: conv1 -> bn1 -> relu -> layer1..3 (BasicBlocks) -> avgpool -> fc, zoo/resnet.h
//           (ResNet-20 by default: 272,186 parameters for 1x28x28 images and 10 classes)
//   gpt: GPT-2 style character-level transformer (zoo/gpt.h), tokens (B, T) -> logits
//        (B*T, vocab)
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tandem/zoo/gpt.h"
#include "tandem/zoo/resnet.h"
#include "tandem/runtime/model.h"

namespace tandem {

struct ModelConfig {
  std::string name = "mlp";  // mlp | cnn | resnet | gpt
  int64_t hidden = 512;      // mlp width (cnn ignores it)
  int64_t in_channels = 1, height = 28, width = 28, classes = 10;  // classes: gpt's vocabulary
  GptConfig gpt;             // gpt only (its vocab_size is `classes`)
  ResNetConfig resnet;       // resnet only
};

const std::vector<std::string>& model_names();
// Throws std::invalid_argument naming the model and the accepted names.
std::unique_ptr<Model> build_model(const ModelConfig& config, uint64_t seed);

}  // namespace tandem
