// Factories, metadata, views sharing storage, copies between devices.
#include "support/test_support.h"

namespace tandem {
namespace {

using testing::expect_values;

class TensorTest : public testing::EveryDevice {};

TEST_P(TensorTest, FactoriesFillValues) {
  expect_values(Tensor::zeros({2, 3}, device()), std::vector<double>(6, 0.0), {2, 3});
  expect_values(Tensor::ones({4}, device()), std::vector<double>(4, 1.0), {4});
  expect_values(Tensor::full({2, 2}, 2.5f, device()), std::vector<double>(4, 2.5), {2, 2});
  expect_values(Tensor::from_vector({1, 2, 3, 4, 5, 6}, {3, 2}, device()), {1, 2, 3, 4, 5, 6}, {3, 2});
  expect_values(Tensor::scalar(7.0f, device()), {7.0}, {});
  EXPECT_EQ(Tensor::zeros({2, 3}, device()).device(), device());
  EXPECT_EQ(Tensor::empty({1, 2, 3, 0, 4}, device()).numel(), 0);
  EXPECT_EQ(Tensor::empty({1, 2, 3, 0, 4}, device()).shape(), (Shape{1, 2, 3, 0, 4}));
}

TEST_P(TensorTest, FactoryErrors) {
  EXPECT_ERROR(Tensor::from_vector({1, 2, 3}, {2, 2}, device()), "got 3 values for shape [2, 2] (4 elements)");
  EXPECT_ERROR(Tensor::zeros({2, -1}, device()), "negative size -1 in shape [2, -1]");
  EXPECT_ERROR(Tensor::ones({2}, device()).item(), "expected a one-element tensor, got shape [2]");
  EXPECT_ERROR(Tensor().shape(), "undefined");
}

TEST_P(TensorTest, SizeArithmeticThatOverflowsIsAnError) {
  constexpr int64_t k32 = int64_t{1} << 32;
  // 2^32 * 2^32 wraps to 0 elements in unchecked int64 arithmetic; a later fill would then write out of bounds.
  EXPECT_ERROR(Tensor::empty({k32, k32}, device()), "Tensor::empty: shape [4294967296, 4294967296] has more than");
  EXPECT_ERROR(Tensor::zeros({k32, k32, 0}, device()), "has more than 2^63 - 1 elements");
  // No elements, but strides that would not fit in int64.
  EXPECT_ERROR(Tensor::empty({0, INT64_MAX, INT64_MAX}, device()), "has more than 2^63 - 1 elements");
  EXPECT_EQ(Tensor::empty({0, INT64_MAX}, device()).numel(), 0);
  // Fits in elements, not in bytes.
  EXPECT_ERROR(Tensor::empty({int64_t{1} << 62}, device()), "needs more than 2^63 - 1 bytes");
  EXPECT_ERROR(Tensor::randn({k32, k32}, device()), "Tensor::randn: shape [4294967296, 4294967296]");
  EXPECT_ERROR(Tensor::rand({-3}, device()), "negative size -3");
  // Fits in int64 but not in memory: an Error, never std::bad_alloc.
  EXPECT_THROW(Tensor::empty({int64_t{1} << 40, 1 << 20}, device()), Error);
  EXPECT_THROW(Tensor::randn({int64_t{1} << 50}, device()), Error);
  // A view of a tensor with no elements cannot take a shape whose product overflows to 0.
  Tensor none = Tensor::empty({0}, device());
  EXPECT_ERROR(none.view({k32, k32, 0}), "Tensor::view: shape [4294967296, 4294967296, 0] has more than");
  EXPECT_ERROR(none.view({k32, k32, -1}), "Tensor::view: shape [4294967296, 4294967296, 1] has more than");
}

TEST_P(TensorTest, MetadataAndItem) {
  Tensor t = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, device());
  EXPECT_EQ(t.dim(), 2);
  EXPECT_EQ(t.size(-1), 3);
  EXPECT_EQ(t.size(0), 2);
  EXPECT_ERROR(t.size(2), "out of range [-2, 1]");
  EXPECT_EQ(t.strides(), (Shape{3, 1}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(Tensor::scalar(3.5f, device()).item(), 3.5f);
  EXPECT_FALSE(Tensor().defined());
}

TEST_P(TensorTest, ViewsShareStorage) {
  Tensor t = Tensor::from_vector({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4}, device());
  Tensor rows = t.narrow(0, 1, 2);
  expect_values(rows, {4, 5, 6, 7, 8, 9, 10, 11}, {2, 4});
  EXPECT_EQ(rows.data_ptr(), static_cast<const float*>(t.data_ptr()) + 4);
  Tensor cols = t.narrow(1, 1, 2);
  EXPECT_FALSE(cols.is_contiguous());
  expect_values(cols, {1, 2, 5, 6, 9, 10}, {3, 2});
  Tensor tt = t.t();
  EXPECT_TRUE(tt.shares_storage_with(t));
  expect_values(tt, {0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}, {4, 3});
  Tensor flat = t.view({-1});
  EXPECT_EQ(flat.data_ptr(), t.data_ptr());
  expect_values(t.view({2, -1}).narrow(0, 1, 1), {6, 7, 8, 9, 10, 11}, {1, 6});
  // A write through a view is seen by the base.
  {
    NoGradGuard no_grad;
    rows.fill_(-1.0f);
  }
  expect_values(t, {0, 1, 2, 3, -1, -1, -1, -1, -1, -1, -1, -1}, {3, 4});
}

TEST_P(TensorTest, ViewErrors) {
  Tensor t = Tensor::zeros({3, 4}, device());
  EXPECT_ERROR(t.view({5, -1}), "shape [5, -1] is invalid for a tensor of 12 elements");
  EXPECT_ERROR(t.view({-1, -1}), "only one dimension can be -1");
  EXPECT_ERROR(t.t().view({12}), "is not contiguous; use reshape()");
  EXPECT_ERROR(t.narrow(0, 2, 2), "start 2 and length 2 are out of bounds for dimension 0 of size 3");
  // start + length would wrap around in int64.
  EXPECT_ERROR(t.narrow(0, 1, INT64_MAX), "start 1 and length 9223372036854775807 are out of bounds");
  EXPECT_ERROR(t.split({INT64_MAX, INT64_MAX, 2}), "Tensor::split: sizes sum to more than 2^63 - 1");
  EXPECT_EQ(t.chunk(INT64_MAX).size(), 3u);
  EXPECT_ERROR(t.narrow(2, 0, 1), "out of range");
  EXPECT_ERROR(Tensor::zeros({2, 3, 4}, device()).t(), "expected a 2-D tensor");
  EXPECT_ERROR(t.split({1, 1}), "sizes sum to 2 but dimension 0 has size 3");
  EXPECT_ERROR(t.chunk(0), "chunks must be positive");
}

TEST_P(TensorTest, ReshapeCopiesOnlyWhenNeeded) {
  Tensor t = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, device());
  EXPECT_EQ(t.reshape({3, 2}).data_ptr(), t.data_ptr());
  Tensor r = t.t().reshape({6});
  EXPECT_FALSE(r.shares_storage_with(t));
  expect_values(r, {1, 4, 2, 5, 3, 6}, {6});
  Tensor c = t.t().contiguous();
  EXPECT_TRUE(c.is_contiguous());
  expect_values(c, {1, 4, 2, 5, 3, 6}, {3, 2});
  EXPECT_TRUE(t.contiguous().is_same(t));
}

TEST_P(TensorTest, ChunkFollowsTorchRules) {
  const auto sizes = [&](int64_t n, int64_t chunks) {
    std::vector<int64_t> out;
    for (const Tensor& part : Tensor::zeros({n, 2}, device()).chunk(chunks)) out.push_back(part.size(0));
    return out;
  };
  EXPECT_EQ(sizes(13, 6), (std::vector<int64_t>{3, 3, 3, 3, 1}));
  EXPECT_EQ(sizes(1, 2), (std::vector<int64_t>{1}));
  EXPECT_EQ(sizes(6, 3), (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(sizes(7, 2), (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(sizes(0, 3), (std::vector<int64_t>{0, 0, 0}));
  Tensor t = Tensor::from_vector({0, 1, 2, 3, 4, 5}, {2, 3}, device());
  std::vector<Tensor> parts = t.chunk(2, -1);
  ASSERT_EQ(parts.size(), 2u);
  expect_values(parts[0], {0, 1, 3, 4}, {2, 2});
  expect_values(parts[1], {2, 5}, {2, 1});
  EXPECT_TRUE(parts[1].shares_storage_with(t));
}

// Note [Split gradients]: the parts are one node's outputs, and its backward writes each part's gradient into its
// slice (zeros for a part that got none), also for parts of a strided input.
TEST_P(TensorTest, SplitPartsShareOneGradientNode) {
  Tensor x = Tensor::from_vector({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {2, 6}, device());
  x.set_requires_grad(true);
  const std::vector<Tensor> parts = x.split({2, 1, 3}, 1);
  ASSERT_EQ(parts.size(), 3u);
  ASSERT_NE(parts[0].grad_fn(), nullptr);
  EXPECT_EQ(parts[0].grad_fn()->name(), "SplitBackward");
  EXPECT_EQ(parts[0].grad_fn(), parts[2].grad_fn());
  expect_values(parts[2], {3, 4, 5, 9, 10, 11}, {2, 3});
  (sum(parts[0] * 2.0f) + sum(parts[2] * parts[2])).backward();  // parts[1] gets no gradient
  expect_values(x.grad(), {2, 2, 0, 6, 8, 10, 2, 2, 0, 18, 20, 22}, {2, 6});

  Tensor y = Tensor::from_vector({0, 1, 2, 3, 4, 5}, {3, 2}, device());
  y.set_requires_grad(true);
  const std::vector<Tensor> columns = y.t().chunk(2, 0);  // [1, 3] views of a transpose
  (sum(columns[0] * 3.0f) + sum(columns[1])).backward();
  expect_values(y.grad(), {3, 1, 3, 1, 3, 1}, {3, 2});
}

TEST_P(TensorTest, CloneIsIndependent) {
  Tensor t = Tensor::from_vector({1, 2, 3}, {3}, device());
  Tensor c = t.clone();
  EXPECT_FALSE(c.shares_storage_with(t));
  {
    NoGradGuard no_grad;
    c.fill_(0.0f);
  }
  expect_values(t, {1, 2, 3}, {3});
}

TEST_P(TensorTest, ToSameDeviceIsTheSameTensor) {
  Tensor t = Tensor::ones({2}, device());
  EXPECT_TRUE(t.to(device()).is_same(t));
}

TEST_P(TensorTest, CopiesBetweenDevices) {
  std::vector<Device> targets = {Device::cpu(0), Device::cpu(1)};
  for (int i = 0; i < cuda_device_count(); ++i) targets.push_back(Device::cuda(i));
  Tensor t = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, device());
  for (const Device& target : targets) {
    Tensor moved = t.t().to(target);  // non-contiguous source
    EXPECT_EQ(moved.device(), target);
    expect_values(moved, {1, 4, 2, 5, 3, 6}, {3, 2});
    Tensor back = moved.to(device());
    expect_values(back, {1, 4, 2, 5, 3, 6}, {3, 2});
  }
}

TEST_P(TensorTest, InPlaceUpdates) {
  Tensor t = Tensor::from_vector({1, 2, 3, 4}, {2, 2}, device());
  t.add_(Tensor::from_vector({10, 20, 30, 40}, {2, 2}, device()), 0.5f);
  expect_values(t, {6, 12, 18, 24}, {2, 2});
  t.add_(Tensor::from_vector({1, 2}, {2}, device()));  // broadcast row
  expect_values(t, {7, 14, 19, 26}, {2, 2});
  t.mul_(2.0f);
  expect_values(t, {14, 28, 38, 52}, {2, 2});
  t.copy_(Tensor::from_vector({5, 6}, {2}, Device::cpu(1)));  // broadcast, from another device
  expect_values(t, {5, 6, 5, 6}, {2, 2});
  t.narrow(1, 0, 1).zero_();
  expect_values(t, {0, 6, 0, 6}, {2, 2});
  Tensor leaf = Tensor::ones({2}, device()).set_requires_grad();
  EXPECT_ERROR(leaf.add_(leaf), "in-place update of a tensor that requires grad");
  EXPECT_ERROR(t.add_(Tensor::ones({3}, device())), "cannot expand");
  EXPECT_ERROR(t.t().mul_(2.0f), "must be contiguous");
}

TEST_P(TensorTest, PrintsValues) {
  Tensor t = Tensor::from_vector({1, 2, 3, 4}, {2, 2}, device());
  const std::string text = t.str();
  EXPECT_NE(text.find("[[1, 2],\n [3, 4]]"), std::string::npos) << text;
  EXPECT_NE(text.find("shape=[2, 2]"), std::string::npos) << text;
  EXPECT_NE(text.find(device().str()), std::string::npos) << text;
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(TensorTest);

}  // namespace
}  // namespace tandem
