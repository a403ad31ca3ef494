// Layer counters (non-parameter state a resumed run needs): Dropout's forward count
// round-trips through Model::counters/set_counters, so a restored model draws the same
// next mask as the original; unknown names are refused by name.
#include <gtest/gtest.h>

#include "runtime/layers/dropout.h"
#include "runtime/layers/linear.h"
#include "runtime/model.h"

using namespace tandem;

namespace {
std::unique_ptr<Model> model_with_dropout() {
  auto m = std::make_unique<Model>();
  m->add("fc", std::make_unique<Linear>(4, 8));
  m->add("drop", std::make_unique<Dropout>(0.5f, 9));
  m->reset_parameters(1);
  return m;
}
}  // namespace

TEST(ModelCounters, DropoutCountRestoresTheNextMask) {
  Tensor x = Tensor::from_vector(std::vector<float>(12, 1.0f), {3, 4});
  auto a = model_with_dropout();
  for (int i = 0; i < 3; ++i) a->forward(x);
  auto saved = a->counters();
  ASSERT_EQ(saved.size(), 1u);
  EXPECT_EQ(saved.at("drop.calls"), 3u);
  std::vector<float> next = a->forward(x).to_vector();

  auto b = model_with_dropout();
  b->set_counters(saved);
  EXPECT_EQ(b->forward(x).to_vector(), next);
  auto fresh = model_with_dropout();
  EXPECT_NE(fresh->forward(x).to_vector(), next);  // without the counter: the first mask
}

TEST(ModelCounters, UnknownCountersAreRefusedByName) {
  auto m = model_with_dropout();
  try {
    m->set_counters({{"nope.calls", 1}});
    FAIL() << "expected a throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("nope.calls"), std::string::npos);
  }
  EXPECT_THROW(m->set_counters({{"fc.calls", 1}}), std::invalid_argument);  // Linear has none
}
