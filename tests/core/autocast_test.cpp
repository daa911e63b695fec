// AutocastGuard (tandem/core/autocast.h): the scope's precision, nesting, explicit precisions winning over it, and
// products inside it equal to the same products in Precision::BFloat16, forward and backward, on every device.
#include "support/test_support.h"

#include <thread>

namespace tandem {
namespace {

// Rounds every element to bfloat16 and back: the inputs a bf16 product multiplies.
Tensor rounded_to_bf16(const Tensor& x) { return x.detach().to(DType::BFloat16).to(DType::Float32); }


TEST(Autocast, TheScopeSetsTheDefaultPrecisionAndNests) {
  EXPECT_EQ(autocast_precision(), std::nullopt);
  EXPECT_EQ(default_precision(), Precision::Float32);
  {
    AutocastGuard on(DType::BFloat16);
    EXPECT_EQ(autocast_precision(), Precision::BFloat16);
    EXPECT_EQ(default_precision(), Precision::BFloat16);
    {
      AutocastGuard off(DType::Float32);
      EXPECT_EQ(autocast_precision(), std::nullopt);
      EXPECT_EQ(default_precision(), Precision::Float32);
    }
    EXPECT_EQ(default_precision(), Precision::BFloat16);
  }
  EXPECT_EQ(default_precision(), Precision::Float32);
}

TEST(Autocast, TheScopeBelongsToItsThread) {
  AutocastGuard on(DType::BFloat16);
  std::optional<Precision> seen = Precision::TF32;
  std::thread other([&seen] { seen = autocast_precision(); });
  other.join();
  EXPECT_EQ(seen, std::nullopt);
}

TEST(Autocast, RefusesAnIndexDtype) {
  EXPECT_ERROR(AutocastGuard refused(DType::Int64),
               "AutocastGuard: dtype is int64 but expected bfloat16 (autocast on) or float32 (autocast off)");
  EXPECT_EQ(autocast_precision(), std::nullopt);
}

class AutocastOnDevices : public testing::EveryDevice {};

// Inside the scope, matmul's forward and gradients are a product of bf16-rounded inputs, the gradients coming from
// the backward that runs after the scope ended; outside, the same inputs give the float32 product.
TEST_P(AutocastOnDevices, MatmulInsideTheScopeIsTheBf16ProductForwardAndBackward) {
  manual_seed(3);
  const Tensor a = Tensor::randn({2, 5, 7}, device()).set_requires_grad();
  const Tensor b = Tensor::randn({7, 3}, device()).set_requires_grad();
  Tensor y;
  {
    AutocastGuard autocast(DType::BFloat16);
    y = matmul(a, b);
  }
  const Tensor grad_out = Tensor::randn({2, 5, 3}, device());
  y.backward(grad_out);

  const Tensor reference = matmul(rounded_to_bf16(a), rounded_to_bf16(b));
  testing::expect_close(y, reference, 1e-5, 1e-5);
  // The gradients of a bf16 product multiply the rounded gradient and the rounded other input.
  const Tensor g = rounded_to_bf16(grad_out);
  testing::expect_close(a.grad(), matmul(g, rounded_to_bf16(b).t()), 1e-5, 1e-5);
  testing::expect_close(b.grad(), matmul(rounded_to_bf16(a).reshape({10, 7}).t(), g.reshape({10, 3})), 1e-5, 1e-5);
  EXPECT_GT(max_abs_diff(y, matmul(a.detach(), b.detach())), 1e-4) << "the scope changed nothing";
}

TEST_P(AutocastOnDevices, AnExplicitPrecisionWinsOverTheScope) {
  manual_seed(4);
  const Tensor x = Tensor::randn({4, 6}, device());
  const Tensor w = Tensor::randn({5, 6}, device());
  const Tensor bias = Tensor::randn({5}, device());
  const Tensor fp32 = linear(x, w, bias, Precision::Float32);
  AutocastGuard autocast(DType::BFloat16);
  EXPECT_EQ(max_abs_diff(linear(x, w, bias, Precision::Float32), fp32), 0.0);
  EXPECT_EQ(max_abs_diff(linear(x, w, bias), linear(x, w, bias, Precision::BFloat16)), 0.0);
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(AutocastOnDevices);

}  // namespace
}  // namespace tandem
