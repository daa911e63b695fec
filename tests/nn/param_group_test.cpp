// Parameter groups and learning rates through optim::Optimizer, on SGD: each group steps with its own options, the
// flat constructor is one group, set_lr reaches one group or all, and the group bookkeeping is checked.
#include "support/test_support.h"

namespace tandem {
namespace {

using testing::expect_values;

TEST(ParamGroups, EachGroupStepsWithItsOwnOptions) {
  Tensor a = Tensor::from_vector({1.0f}, {1}).set_requires_grad(true);
  Tensor b = Tensor::from_vector({1.0f, 2.0f}, {2}).set_requires_grad(true);
  Tensor c = Tensor::from_vector({4.0f}, {1}).set_requires_grad(true);
  optim::SGD sgd(
      {{.parameters = {a}}, {.parameters = {b, c}, .options = optim::SGDOptions{.lr = 0.5, .momentum = 0.9}}},
      optim::SGDOptions{.lr = 0.1, .weight_decay = 1.0});
  ASSERT_EQ(sgd.param_group_count(), 2u);
  EXPECT_EQ(sgd.parameters().size(), 3u);
  EXPECT_EQ(sgd.param_group_begin(1), 1u);
  EXPECT_EQ(sgd.param_group_end(1), 3u);
  EXPECT_EQ(sgd.param_group_of(0), 0u);
  EXPECT_EQ(sgd.param_group_of(2), 1u);
  EXPECT_EQ(sgd.options(1).momentum, 0.9);
  for (int k = 0; k < 2; ++k) {
    for (const Tensor& p : {a, b, c}) p.set_grad(Tensor::ones(p.shape()));
    sgd.step();
  }
  // a: p -= 0.1 (1 + p) twice: 1 -> 0.8 -> 0.62. b, c: buf 1 then 1.9, p -= 0.5 buf: -0.5 - 0.95 = -1.45 in all.
  expect_values(a, {0.62}, {1});
  expect_values(b, {1 - 1.45, 2 - 1.45}, {2});
  expect_values(c, {4 - 1.45}, {1});
}

TEST(ParamGroups, SetLrReachesOneGroupOrAll) {
  Tensor a = Tensor::ones({1}).set_requires_grad(true);
  Tensor b = Tensor::ones({1}).set_requires_grad(true);
  optim::SGD sgd({{.parameters = {a}}, {.parameters = {b}, .options = optim::SGDOptions{.lr = 0.5}}},
                 optim::SGDOptions{.lr = 0.1});
  EXPECT_EQ(sgd.lr(0), 0.1);
  EXPECT_EQ(sgd.lr(1), 0.5);
  sgd.set_lr(1, 0.25);
  EXPECT_EQ(sgd.options(1).lr, 0.25);
  EXPECT_EQ(sgd.lr(0), 0.1);
  sgd.set_lr(0.75);
  EXPECT_EQ(sgd.lr(0), 0.75);
  EXPECT_EQ(sgd.options(1).lr, 0.75);
  EXPECT_EQ(sgd.options().lr, 0.75);  // options() is group 0's
}

TEST(ParamGroups, TheFlatConstructorIsOneGroupAndEmptyGroupsAreAllowed) {
  Tensor a = Tensor::ones({1}).set_requires_grad(true);
  optim::SGD flat({a}, {.lr = 0.3});
  EXPECT_EQ(flat.param_group_count(), 1u);
  EXPECT_EQ(flat.lr(0), 0.3);
  optim::SGD with_empty({{.parameters = {}}, {.parameters = {a}}}, optim::SGDOptions{});
  EXPECT_EQ(with_empty.param_group_count(), 2u);
  EXPECT_EQ(with_empty.param_group_end(0), 0u);
  EXPECT_EQ(with_empty.param_group_of(0), 1u);
}

TEST(ParamGroups, BookkeepingErrors) {
  Tensor a = Tensor::ones({1}).set_requires_grad(true);
  Tensor b = Tensor::ones({1}).set_requires_grad(true);
  EXPECT_ERROR(optim::SGD({{.parameters = {a}}, {.parameters = {b, a}}}, optim::SGDOptions{}),
               "optim::SGD: parameters 0 and 2 are the same tensor");
  EXPECT_ERROR(optim::SGD({{.parameters = {}}}, optim::SGDOptions{}), "optim::SGD: got an empty parameter list");
  EXPECT_ERROR(optim::SGD({{.parameters = {a}, .options = optim::SGDOptions{.momentum = -1}}}, optim::SGDOptions{}),
               "optim::SGD: momentum must be >= 0, got -1");
  optim::SGD sgd({a, b}, {});
  EXPECT_ERROR(sgd.lr(1), "optim::SGD::lr: group 1 but there are 1 parameter groups");
  EXPECT_ERROR(sgd.options(3), "optim::SGD::options: group 3 but there are 1 parameter groups");
  EXPECT_ERROR(sgd.param_group_begin(1), "optim::SGD::param_group_begin: group 1 but there are 1 parameter groups");
  EXPECT_ERROR(sgd.param_group_of(2), "optim::SGD::param_group_of: parameter 2 but there are 2");
  EXPECT_ERROR(sgd.set_lr(0, -1.0), "optim::SGD::set_lr: lr must be >= 0, got -1");
}

}  // namespace
}  // namespace tandem
