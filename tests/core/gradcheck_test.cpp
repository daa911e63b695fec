// A finite-difference gradient check for every differentiable op, on every device.
#include "support/test_support.h"

namespace tandem {
namespace {

using testing::gradcheck;

class GradcheckTest : public testing::EveryDevice {
 protected:
  void SetUp() override {
    EveryDevice::SetUp();
    manual_seed(11);
  }
  Tensor input(const Shape& shape) { return Tensor::randn(shape, device()).set_requires_grad(); }
};

TEST_P(GradcheckTest, Add) {
  gradcheck([](auto& in) { return in[0] + in[1]; }, {input({3, 4}), input({4})});
}
TEST_P(GradcheckTest, Sub) {
  gradcheck([](auto& in) { return in[0] - in[1]; }, {input({3, 1}), input({3, 4})});
}
TEST_P(GradcheckTest, Mul) {
  gradcheck([](auto& in) { return in[0] * in[1]; }, {input({2, 3}), input({2, 1})});
}
TEST_P(GradcheckTest, ScalarMul) {
  gradcheck([](auto& in) { return in[0] * 3.0f - in[0] / 2.0f; }, {input({5})});
}
TEST_P(GradcheckTest, Matmul) {
  gradcheck([](auto& in) { return matmul(in[0], in[1]); }, {input({3, 4}), input({4, 2})});
}
TEST_P(GradcheckTest, MatmulOfTransposedViews) {
  gradcheck([](auto& in) { return matmul(in[0].t(), in[1].t()); }, {input({4, 3}), input({2, 4})});
}
TEST_P(GradcheckTest, Linear) {
  gradcheck([](auto& in) { return linear(in[0], in[1], in[2]); }, {input({5, 3}), input({2, 3}), input({2})});
}
TEST_P(GradcheckTest, LinearWithoutBias) {
  gradcheck([](auto& in) { return linear(in[0], in[1], Tensor()); }, {input({5, 3}), input({2, 3})});
}
TEST_P(GradcheckTest, Relu) {
  // Keep inputs away from the kink at 0, where the finite difference is not the derivative.
  Tensor x = Tensor::from_vector({-1.5f, -0.3f, 0.4f, 2.0f, -0.7f, 0.9f}, {2, 3}, device()).set_requires_grad();
  gradcheck([](auto& in) { return relu(in[0]); }, {x});
}
TEST_P(GradcheckTest, Tanh) {
  gradcheck([](auto& in) { return tanh(in[0]); }, {input({3, 3})});
}
TEST_P(GradcheckTest, Sum) {
  gradcheck([](auto& in) { return sum(in[0]); }, {input({3, 4})});
}
TEST_P(GradcheckTest, SumDim) {
  gradcheck([](auto& in) { return sum(in[0], 1); }, {input({2, 3, 4})});
  gradcheck([](auto& in) { return sum(in[0], 0, true); }, {input({3, 4})});
}
TEST_P(GradcheckTest, Mean) {
  gradcheck([](auto& in) { return mean(in[0]); }, {input({4, 2})});
}
TEST_P(GradcheckTest, Cat) {
  gradcheck([](auto& in) { return cat({in[0], in[1]}, 1); }, {input({2, 3}), input({2, 1})});
}
TEST_P(GradcheckTest, MseLoss) {
  gradcheck([](auto& in) { return mse_loss(in[0], in[1]); }, {input({6, 1}), input({6, 1})});
}
TEST_P(GradcheckTest, Views) {
  gradcheck([](auto& in) { return in[0].narrow(1, 1, 2) * 2.0f; }, {input({3, 4})});
  gradcheck([](auto& in) { return in[0].view({4, 3}).t(); }, {input({3, 4})});
  gradcheck([](auto& in) { return in[0].t().reshape({-1}); }, {input({3, 4})});
  gradcheck([](auto& in) { return in[0].chunk(2)[1] + in[0].split({1, 2})[0]; }, {input({3, 2})});
  gradcheck([](auto& in) {  // a strided input, one part unused
    const std::vector<Tensor> parts = in[0].t().split({1, 2, 1}, 0);
    return parts[2] * 3.0f + parts[0] * parts[0];
  }, {input({3, 4})});
  gradcheck([](auto& in) { return in[0].expand({3, 4}); }, {input({4})});
  gradcheck([](auto& in) { return in[0].sum_to({1, 4}); }, {input({3, 4})});
  gradcheck([](auto& in) { return in[0].clone() * in[0].contiguous(); }, {input({3})});
}
TEST_P(GradcheckTest, CopyToAnotherDevice) {
  gradcheck([](auto& in) { return in[0].to(Device::cpu(1)) * 2.0f; }, {input({2, 2})});
}
TEST_P(GradcheckTest, Composite) {
  // A two-layer net and its loss: the path the trainers take.
  Tensor target = Tensor::randn({5, 1}, device());
  gradcheck([target](auto& in) { return mse_loss(linear(tanh(linear(in[0], in[1], in[2])), in[3], in[4]), target); },
            {input({5, 3}), input({4, 3}), input({4}), input({1, 4}), input({1})});
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(GradcheckTest);

}  // namespace
}  // namespace tandem
