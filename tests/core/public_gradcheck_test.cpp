// The public autograd::gradcheck: its report, its error naming the worst element, and its argument checks.
#include "support/test_support.h"

namespace tandem {
namespace {

using autograd::GradcheckOptions;

// y = x^2 with a backward that is off by a factor at one element: what a user's broken layer looks like.
class WrongSquare final : public autograd::Function {
 public:
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    save_for_backward({in[0]});
    return {in[0] * in[0]};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    const Tensor x = saved_tensors()[0];
    const Tensor factor = Tensor::from_vector({2, 2, 2, 3}, {2, 2}, x.device());
    return {grads[0] * x * factor};
  }
};

class PublicGradcheckTest : public testing::EveryDevice {};

TEST_P(PublicGradcheckTest, ReportsErrorsPerInput) {
  manual_seed(51);
  const Tensor a = Tensor::randn({3, 4}, device()).set_requires_grad();
  const Tensor b = Tensor::randn({4}, device());
  const Tensor c = Tensor::randn({4}, device()).set_requires_grad();
  const autograd::GradcheckReport report =
      autograd::gradcheck([](const std::vector<Tensor>& in) { return tanh(in[0] * in[1]) + in[2]; }, {a, b, c});
  ASSERT_EQ(report.inputs.size(), 2u);
  EXPECT_EQ(report.inputs[0].input, 0u);
  EXPECT_EQ(report.inputs[1].input, 2u);
  EXPECT_LT(report.inputs[0].max_abs_error, 1e-3);
  EXPECT_LT(report.inputs[1].max_abs_error, 1e-3);
  EXPECT_GE(report.inputs[0].worst_element, 0);
  // The caller's tensors keep no gradient from the check.
  EXPECT_FALSE(a.grad().defined());
  EXPECT_FALSE(c.grad().defined());
}

TEST_P(PublicGradcheckTest, ThrowsNamingTheWorstElement) {
  const Tensor x = Tensor::from_vector({0.5f, -1.0f, 1.5f, 2.0f}, {2, 2}, device()).set_requires_grad();
  const auto wrong = [](const std::vector<Tensor>& in) {
    return autograd::apply(std::make_shared<WrongSquare>(), {in[0]})[0];
  };
  EXPECT_ERROR(autograd::gradcheck(wrong, {x}), "gradcheck: input 0 element [1, 1]: analytic gradient");
  // Tolerances wide enough let it pass, and the report shows the error.
  const auto report = autograd::gradcheck(wrong, {x}, {.eps = 1e-2, .atol = 10, .rtol = 0});
  EXPECT_NEAR(report.inputs[0].max_rel_error, 0.5, 1e-3);
  EXPECT_EQ(report.inputs[0].worst_element, 3);
}

TEST_P(PublicGradcheckTest, RefusesBadArguments) {
  const Tensor x = Tensor::ones({2}, device()).set_requires_grad();
  const auto identity = [](const std::vector<Tensor>& in) { return in[0] * 1.0f; };
  EXPECT_ERROR(autograd::gradcheck(identity, {}), "gradcheck: expected at least one input");
  EXPECT_ERROR(autograd::gradcheck(identity, {Tensor()}), "gradcheck: input 0 is an undefined tensor");
  EXPECT_ERROR(autograd::gradcheck(identity, {Tensor::ones({2}, device())}), "gradcheck: no input requires grad");
  EXPECT_ERROR(autograd::gradcheck(identity, {x}, {.eps = 0}), "gradcheck: eps is 0 but expected a positive number");
  EXPECT_ERROR(autograd::gradcheck(identity, {x}, {.atol = -1}), "gradcheck: atol -1 and rtol 0.01 must be >= 0");
  EXPECT_ERROR(autograd::gradcheck([](const std::vector<Tensor>& in) { return in[0].detach(); }, {x}),
               "gradcheck: f's output (shape [2]) does not require grad");
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(PublicGradcheckTest);

}  // namespace
}  // namespace tandem
