// make_mlp: the layers it builds, with and without Dropout, and its errors.

#include <cmath>

#include "support/test_support.h"

namespace tandem::trainers {
namespace {

TEST(MakeMlp, DropoutFollowsEachHiddenActivation) {
  const auto mlp = make_mlp(8, {6, 4}, 3, Activation::ReLU, 0.25);
  EXPECT_EQ(describe_module(*mlp),
            "Sequential(0: Linear(in_features=8, out_features=6, bias=true), 1: ReLU(), 2: Dropout(p=0.250000), "
            "3: Linear(in_features=6, out_features=4, bias=true), 4: ReLU(), 5: Dropout(p=0.250000), "
            "6: Linear(in_features=4, out_features=3, bias=true))");
  const auto linear = make_mlp(8, {6}, 1, Activation::None, 0.5);  // no activation: Dropout follows the Linear
  EXPECT_EQ(describe_module(*linear),
            "Sequential(0: Linear(in_features=8, out_features=6, bias=true), 1: Dropout(p=0.500000), "
            "2: Linear(in_features=6, out_features=1, bias=true))");
}

TEST(MakeMlp, DropoutZeroBuildsTheSameModelAsBefore) {
  manual_seed(3);
  const auto plain = make_mlp(8, {6, 4}, 3, Activation::Tanh);
  manual_seed(3);
  const auto zero = make_mlp(8, {6, 4}, 3, Activation::Tanh, 0.0);
  EXPECT_EQ(describe_module(*zero), describe_module(*plain));
  const auto expected = plain->named_parameters();
  const auto actual = zero->named_parameters();
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_EQ(actual[i].first, expected[i].first);
    EXPECT_EQ(actual[i].second.to_vector(), expected[i].second.to_vector()) << actual[i].first;
  }
}

TEST(MakeMlp, DropoutTrainsAndIsOffInEval) {
  manual_seed(0);
  const auto mlp = make_mlp(4, {64}, 2, Activation::ReLU, 0.5);
  const Tensor x = Tensor::ones({16, 4});
  const std::vector<float> first = (*mlp)(x).to_vector();
  const std::vector<float> second = (*mlp)(x).to_vector();
  EXPECT_NE(first, second);  // other masks in each training forward
  mlp->eval();
  EXPECT_EQ((*mlp)(x).to_vector(), (*mlp)(x).to_vector());
}

TEST(MakeMlp, BadDropoutRatesAreRefused) {
  EXPECT_ERROR(make_mlp(8, {6}, 3, Activation::ReLU, 1.0), "nn::Dropout: p is 1 but expected a probability in [0, 1)");
  EXPECT_ERROR(make_mlp(8, {6}, 3, Activation::ReLU, -0.1), "nn::Dropout: p is -0.1 but expected a probability");
  EXPECT_ERROR(make_mlp(8, {6}, 3, Activation::ReLU, std::nan("")), "nn::Dropout: p is nan but expected");
}

}  // namespace
}  // namespace tandem::trainers
