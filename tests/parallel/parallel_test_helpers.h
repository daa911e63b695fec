#pragma once
// Helpers shared by the parallel tests: a small two-layer net, seeded data, single-device references.

#include <memory>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace tandem::testing {

// Linear(in, hidden) -> tanh -> Linear(hidden, out), built on `device` from a fixed seed, so that two nets built
// with the same arguments are equal.
class TwoLayerNet : public nn::Cloneable<TwoLayerNet> {
 public:
  TwoLayerNet(int64_t in, int64_t hidden, int64_t out, Device device) {
    manual_seed(1234);
    fc1 = std::make_shared<nn::Linear>(in, hidden, true, device);
    fc2 = std::make_shared<nn::Linear>(hidden, out, true, device);
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  Tensor forward(const Tensor& x) override { return fc2->forward(tanh(fc1->forward(x))); }

  std::shared_ptr<nn::Linear> fc1;
  std::shared_ptr<nn::Linear> fc2;
};

inline std::shared_ptr<TwoLayerNet> make_net(Device device, int64_t in = 4, int64_t hidden = 6, int64_t out = 2) {
  return std::make_shared<TwoLayerNet>(in, hidden, out, device);
}

// Seeded normal values (the same on every device for the same seed).
inline Tensor seeded_randn(const Shape& shape, Device device, uint64_t seed) {
  manual_seed(seed);
  return Tensor::randn(shape, device);
}

// The .grad of every parameter, in parameters() order (undefined where there is none).
inline std::vector<Tensor> gradients_of(const nn::Module& module) {
  std::vector<Tensor> grads;
  for (const Tensor& parameter : module.parameters()) grads.push_back(parameter.grad());
  return grads;
}

// Expects the parameters of `actual` and `expected` to be equal position by position (any devices).
inline void expect_parameters_close(const nn::Module& actual, const nn::Module& expected, double rtol = 1e-5,
                                    double atol = 1e-6) {
  const auto a = actual.named_parameters();
  const auto b = expected.named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE("parameter " + a[i].first);
    EXPECT_EQ(a[i].first, b[i].first);
    expect_close(a[i].second, b[i].second, rtol, atol);
  }
}

// Expects the gradients of `actual`'s parameters to equal `expected` (any devices), position by position.
inline void expect_gradients_close(const nn::Module& actual, const std::vector<Tensor>& expected, double rtol = 1e-5,
                                   double atol = 1e-6) {
  const auto named = actual.named_parameters();
  ASSERT_EQ(named.size(), expected.size());
  for (size_t i = 0; i < named.size(); ++i) {
    SCOPED_TRACE("gradient of " + named[i].first);
    ASSERT_TRUE(named[i].second.grad().defined());
    expect_close(named[i].second.grad(), expected[i], rtol, atol);
  }
}

}  // namespace tandem::testing
