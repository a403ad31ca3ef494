// Model zoo builders.
#include "zoo/zoo.h"

#include <stdexcept>

#include "runtime/layers/activation.h"
#include "runtime/layers/conv2d.h"
#include "runtime/layers/flatten.h"
#include "runtime/layers/linear.h"
#include "runtime/layers/maxpool2d.h"

namespace tandem {

const std::vector<std::string>& model_names() {
  static const std::vector<std::string> names = {"mlp", "cnn", "resnet", "gpt"};
  return names;
}

static std::unique_ptr<Model> build_mlp(const ModelConfig& c) {
  auto m = std::make_unique<Model>();
  int64_t in = c.in_channels * c.height * c.width;
  m->add("flatten", std::make_unique<Flatten>());
  m->add("fc1", std::make_unique<Linear>(in, c.hidden));
  m->add("relu1", std::make_unique<ReLU>());
  m->add("fc2", std::make_unique<Linear>(c.hidden, c.hidden));
  m->add("relu2", std::make_unique<ReLU>());
  m->add("fc3", std::make_unique<Linear>(c.hidden, c.classes));
  return m;
}

static std::unique_ptr<Model> build_cnn(const ModelConfig& c) {
  auto m = std::make_unique<Model>();
  m->add("conv1", std::make_unique<Conv2d>(c.in_channels, 32, 3, 1, 1));
  m->add("relu1", std::make_unique<ReLU>());
  m->add("pool1", std::make_unique<MaxPool2d>(2));
  m->add("conv2", std::make_unique<Conv2d>(32, 64, 3, 1, 1));
  m->add("relu2", std::make_unique<ReLU>());
  m->add("pool2", std::make_unique<MaxPool2d>(2));
  m->add("flatten", std::make_unique<Flatten>());
  m->add("fc1", std::make_unique<Linear>(64 * (c.height / 4) * (c.width / 4), 48));
  m->add("relu3", std::make_unique<ReLU>());
  m->add("fc2", std::make_unique<Linear>(48, c.classes));
  return m;
}

std::unique_ptr<Model> build_model(const ModelConfig& config, uint64_t seed) {
  std::unique_ptr<Model> m;
  if (config.name == "mlp") {
    if (config.hidden <= 0) throw std::invalid_argument("--hidden must be positive");
    m = build_mlp(config);
  } else if (config.name == "cnn") {
    m = build_cnn(config);
  } else if (config.name == "resnet") {
    // Initialised by build_resnet (torchvision's scheme, not the layers' defaults).
    return build_resnet(config.resnet, config.in_channels, config.height, config.width, config.classes, seed);
  } else if (config.name == "gpt") {
    GptConfig g = config.gpt;
    g.vocab_size = config.classes;
    return std::make_unique<GptModel>(g, seed);  // initialised by its constructor
  } else {
    throw std::invalid_argument("unknown model '" + config.name + "' (expected mlp, cnn, resnet or gpt)");
  }
  m->reset_parameters(seed);
  return m;
}

}  // namespace tandem
