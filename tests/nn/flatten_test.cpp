// nn::Flatten and nn::Unflatten: PyTorch's shapes, views of the input, values and gradients passed through, errors
// naming the layer, and their repr.
#include <numeric>

#include "support/test_support.h"

namespace tandem {
namespace {

using testing::expect_values;

class FlattenTest : public testing::EveryDevice {};

std::vector<double> iota_values(int64_t count) {
  std::vector<double> values(static_cast<size_t>(count));
  std::iota(values.begin(), values.end(), 0.0);
  return values;
}

Tensor iota_tensor(const Shape& shape, Device device) {
  const std::vector<double> values = iota_values(numel_of(shape));
  return Tensor::from_vector(std::vector<float>(values.begin(), values.end()), shape, device);
}

TEST_P(FlattenTest, FlattenMergesDimsAsPyTorch) {
  const Tensor x = iota_tensor({2, 3, 4, 5}, device());
  EXPECT_EQ(nn::Flatten()(x).shape(), (Shape{2, 60}));
  EXPECT_EQ(nn::Flatten(0)(x).shape(), (Shape{120}));
  EXPECT_EQ(nn::Flatten(1, 2)(x).shape(), (Shape{2, 12, 5}));
  EXPECT_EQ(nn::Flatten(-3, -2)(x).shape(), (Shape{2, 12, 5}));
  EXPECT_EQ(nn::Flatten(2, 2)(x).shape(), (Shape{2, 3, 4, 5}));
  EXPECT_EQ(nn::Flatten(0)(Tensor::full({}, 7.0f, device())).shape(), (Shape{1}));
  // Row-major order kept, and a view of the input's storage.
  const Tensor flat = nn::Flatten()(x);
  expect_values(flat, iota_values(120), {2, 60});
  EXPECT_EQ(flat.data_ptr(), x.data_ptr());
}

TEST_P(FlattenTest, FlattenOfANonContiguousInputCopiesAsReshape) {
  const Tensor x = iota_tensor({2, 3, 4}, device()).transpose(0, 2);  // [4, 3, 2]
  const Tensor flat = nn::Flatten()(x);
  std::vector<double> expected;
  for (int64_t k = 0; k < 4; ++k)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t i = 0; i < 2; ++i) expected.push_back(static_cast<double>(i * 12 + j * 4 + k));
  expect_values(flat, expected, {4, 6});
}

TEST_P(FlattenTest, UnflattenSplitsOneDimAsPyTorch) {
  const Tensor x = iota_tensor({3, 64}, device());
  const Tensor images = nn::Unflatten(1, {1, 8, 8})(x);
  EXPECT_EQ(images.shape(), (Shape{3, 1, 8, 8}));
  expect_values(images, iota_values(192), {3, 1, 8, 8});
  EXPECT_EQ(images.data_ptr(), x.data_ptr());
  EXPECT_EQ(nn::Unflatten(-1, {4, -1})(x).shape(), (Shape{3, 4, 16}));
  EXPECT_EQ(nn::Unflatten(0, {3, 1})(x).shape(), (Shape{3, 1, 64}));
  // A strided input: the split dim of a transpose is still one evenly strided line, so the result is a view.
  const Tensor columns = x.t();  // [64, 3], strides [1, 64]
  const Tensor split = nn::Unflatten(0, {8, 8})(columns);
  EXPECT_EQ(split.shape(), (Shape{8, 8, 3}));
  EXPECT_EQ(split.data_ptr(), x.data_ptr());
  std::vector<double> expected;
  for (int64_t i = 0; i < 64; ++i)
    for (int64_t j = 0; j < 3; ++j) expected.push_back(static_cast<double>(j * 64 + i));
  expect_values(split, expected, {8, 8, 3});
  // Flatten undoes it.
  expect_values(nn::Flatten()(images), iota_values(192), {3, 64});
}

TEST_P(FlattenTest, GradientsPassThroughBothLayers) {
  manual_seed(41);
  const Tensor x = Tensor::randn({2, 12}, device()).set_requires_grad();
  const Tensor weights = Tensor::randn({2, 3, 4}, device());
  nn::Unflatten unflatten(1, {3, 4});
  nn::Flatten flatten(0);
  // d/dx sum(unflatten(x) * w) is w laid out as x; through Flatten too.
  sum(unflatten(x) * weights).backward();
  expect_values(x.grad(), testing::to_double(weights), {2, 12});
  testing::gradcheck([&](const std::vector<Tensor>& in) { return flatten(unflatten(in[0]) * unflatten(in[0])); }, {x});
}

TEST_P(FlattenTest, ErrorsNameTheLayer) {
  const Tensor x = Tensor::zeros({2, 3}, device());
  EXPECT_ERROR(nn::Flatten(2)(x), "nn::Flatten: start_dim 2 is out of range for an input of shape [2, 3]");
  EXPECT_ERROR(nn::Flatten(0, -3)(x), "nn::Flatten: end_dim -3 is out of range for an input of shape [2, 3]");
  EXPECT_ERROR(nn::Flatten(1, 0)(x), "nn::Flatten: start_dim 1 comes after end_dim 0 for an input of shape [2, 3]");
  EXPECT_ERROR(nn::Flatten()(Tensor::full({}, 1.0f, device())),
               "nn::Flatten: start_dim 1 is out of range for an input of shape []");
  EXPECT_ERROR(nn::Flatten()(Tensor()), "nn::Flatten: the input is undefined");

  EXPECT_ERROR(nn::Unflatten(1, {}), "nn::Unflatten: sizes are empty but expected at least one size");
  EXPECT_ERROR(nn::Unflatten(1, {-1, -1}), "nn::Unflatten: sizes [-1, -1] have more than one -1");
  EXPECT_ERROR(nn::Unflatten(1, {-2, 3}), "nn::Unflatten: sizes [-2, 3] have a size below -1");
  EXPECT_ERROR(nn::Unflatten(1, {2, 2})(x),
               "nn::Unflatten: sizes [2, 2] hold 4 elements but dim 1 has size 3 (input shape [2, 3])");
  EXPECT_ERROR(nn::Unflatten(1, {2, -1})(x),
               "nn::Unflatten: sizes [2, -1] cannot split dim 1 of size 3 (input shape [2, 3])");
  EXPECT_ERROR(nn::Unflatten(2, {3})(x), "nn::Unflatten: dim 2 is out of range for an input of shape [2, 3]");
  EXPECT_ERROR(nn::Unflatten(0, {1})(Tensor::full({}, 1.0f, device())),
               "nn::Unflatten: the input is 0-D but expected at least one dim");
  EXPECT_ERROR(nn::Unflatten(0, {1})(Tensor()), "nn::Unflatten: the input is undefined");
}

TEST_P(FlattenTest, Repr) {
  EXPECT_EQ(nn::Flatten().extra_repr(), "start_dim=1, end_dim=-1");
  EXPECT_EQ(nn::Flatten(0, 2).extra_repr(), "start_dim=0, end_dim=2");
  EXPECT_EQ(nn::Unflatten(1, {1, 8, 8}).extra_repr(), "dim=1, unflattened_size=(1, 8, 8)");
  EXPECT_EQ(nn::Unflatten(-1, {6}).extra_repr(), "dim=-1, unflattened_size=(6,)");
  EXPECT_EQ(nn::Flatten().name(), "Flatten");
  nn::Sequential model{std::make_shared<nn::Unflatten>(1, Shape{2, 2}), std::make_shared<nn::Flatten>()};
  std::ostringstream text;
  text << model;
  EXPECT_NE(text.str().find("(0): Unflatten(dim=1, unflattened_size=(2, 2))"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("(1): Flatten(start_dim=1, end_dim=-1)"), std::string::npos) << text.str();
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(FlattenTest);

}  // namespace
}  // namespace tandem
