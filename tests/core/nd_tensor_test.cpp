// N-D tensors: the dimension views (transpose, permute, unsqueeze, squeeze, flatten, reshape's views) and matmul with
// torch.matmul's rules, bmm, against float64 references and finite differences on every device.
#include "support/test_support.h"

namespace tandem {
namespace {

using testing::expect_values;
using testing::gradcheck;
using testing::to_double;

class NdTensorTest : public testing::EveryDevice {
 protected:
  void SetUp() override {
    EveryDevice::SetUp();
    manual_seed(5);
  }
  // 0, 1, 2, ... in `shape`.
  Tensor numbered(const Shape& shape) {
    return Tensor::arange(numel_of(shape), DType::Float32, device()).reshape(shape);
  }
  Tensor input(const Shape& shape) { return Tensor::randn(shape, device()).set_requires_grad(); }
};

// The row-major values of x read at `strides` (in elements of x's contiguous values) over `shape`: what a view with
// that geometry must hold.
std::vector<double> read_at(const std::vector<double>& x, const Shape& shape, const Shape& strides) {
  std::vector<double> out;
  std::vector<int64_t> index(shape.size(), 0);
  for (int64_t i = 0; i < numel_of(shape); ++i) {
    int64_t at = 0;
    for (size_t d = 0; d < shape.size(); ++d) at += index[d] * strides[d];
    out.push_back(x[static_cast<size_t>(at)]);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

TEST_P(NdTensorTest, TransposeAndPermuteAreViewsWithTheSwappedStrides) {
  const Tensor x = numbered({2, 3, 4});
  const std::vector<double> values = to_double(x);
  const Tensor swapped = x.transpose(0, -1);
  EXPECT_TRUE(swapped.shares_storage_with(x));
  EXPECT_EQ(swapped.strides(), (Shape{1, 4, 12}));
  expect_values(swapped, read_at(values, {4, 3, 2}, {1, 4, 12}), {4, 3, 2});
  const Tensor permuted = x.permute({1, 2, 0});
  EXPECT_EQ(permuted.strides(), (Shape{4, 1, 12}));
  expect_values(permuted, read_at(values, {3, 4, 2}, {4, 1, 12}), {3, 4, 2});
  expect_values(permuted.contiguous(), read_at(values, {3, 4, 2}, {4, 1, 12}), {3, 4, 2});
  EXPECT_TRUE(permuted.contiguous().is_contiguous());
  expect_values(x.transpose(1, 1), values, {2, 3, 4});
  expect_values(numbered({2, 3}).t(), {0, 3, 1, 4, 2, 5}, {3, 2});
}

TEST_P(NdTensorTest, UnsqueezeSqueezeAndFlatten) {
  const Tensor x = numbered({2, 3});
  const std::vector<double> values = to_double(x);
  EXPECT_EQ(x.unsqueeze(0).shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(x.unsqueeze(1).shape(), (Shape{2, 1, 3}));
  EXPECT_EQ(x.unsqueeze(-1).shape(), (Shape{2, 3, 1}));
  expect_values(x.unsqueeze(1), values, {2, 1, 3});
  EXPECT_TRUE(x.unsqueeze(2).shares_storage_with(x));
  EXPECT_EQ(x.unsqueeze(1).squeeze(1).shape(), (Shape{2, 3}));
  EXPECT_EQ(x.squeeze(0).shape(), (Shape{2, 3}));  // size 2: unchanged, as PyTorch
  EXPECT_EQ(numbered({1, 2, 1, 3, 1}).squeeze().shape(), (Shape{2, 3}));
  EXPECT_EQ(Tensor::scalar(2.0f, device()).unsqueeze(0).shape(), (Shape{1}));
  EXPECT_EQ(Tensor::scalar(2.0f, device()).squeeze(0).shape(), (Shape{}));

  const Tensor cube = numbered({2, 3, 4});
  EXPECT_EQ(cube.flatten().shape(), (Shape{24}));
  EXPECT_EQ(cube.flatten(1).shape(), (Shape{2, 12}));
  EXPECT_EQ(cube.flatten(0, 1).shape(), (Shape{6, 4}));
  EXPECT_EQ(cube.flatten(-2, -1).shape(), (Shape{2, 12}));
  EXPECT_EQ(Tensor::scalar(1.0f, device()).flatten().shape(), (Shape{1}));
  EXPECT_TRUE(cube.flatten(1).shares_storage_with(cube));
  // A transpose's dims 0 and 1 (strides 12 and 1) do not step over each other: flattening them copies. A
  // permutation whose dims 1 and 2 do (strides 12 and 4, sizes 2 and 3) merges them in place.
  const Tensor transposed = cube.transpose(1, 2);  // [2, 4, 3], strides [12, 1, 4]
  EXPECT_FALSE(transposed.flatten(0, 1).shares_storage_with(cube));
  expect_values(transposed.flatten(0, 1), to_double(transposed), {8, 3});
  const Tensor outer = cube.permute({2, 0, 1});  // [4, 2, 3], strides [1, 12, 4]
  const Tensor merged = outer.flatten(1);
  EXPECT_TRUE(merged.shares_storage_with(cube));
  EXPECT_EQ(merged.strides(), (Shape{1, 4}));
  expect_values(merged, read_at(to_double(cube), {4, 6}, {1, 4}), {4, 6});
}

TEST_P(NdTensorTest, ReshapeViewsWheneverTheStridesAllowIt) {
  const Tensor x = numbered({4, 6});
  const Tensor columns = x.narrow(1, 0, 4);  // [4, 4], strides [6, 1]: not contiguous
  EXPECT_FALSE(columns.is_contiguous());
  const Tensor split = columns.reshape({4, 2, 2});
  EXPECT_TRUE(split.shares_storage_with(x));
  EXPECT_EQ(split.strides(), (Shape{6, 2, 1}));
  expect_values(split, to_double(columns), {4, 2, 2});
  const Tensor flat = columns.reshape({16});  // rows 6 apart: no view
  EXPECT_FALSE(flat.shares_storage_with(x));
  expect_values(flat, to_double(columns), {16});
  const Tensor broadcast = Tensor::ones({3}, device()).expand({2, 3});
  EXPECT_TRUE(broadcast.reshape({2, 1, 3}).shares_storage_with(broadcast));
  expect_values(broadcast.reshape({6}), std::vector<double>(6, 1.0), {6});
}

TEST_P(NdTensorTest, ViewsCarryGradientsBack) {
  gradcheck([](auto& in) { return in[0].transpose(0, 2) * in[1]; }, {input({2, 3, 4}), input({4, 3, 2})});
  gradcheck([](auto& in) { return in[0].permute({2, 0, 1}).contiguous() * 2.0f; }, {input({2, 3, 4})});
  gradcheck([](auto& in) { return in[0].unsqueeze(1) * in[1]; }, {input({2, 3}), input({2, 4, 3})});
  gradcheck([](auto& in) { return in[0].squeeze(1) * in[0].squeeze(1); }, {input({3, 1, 2})});
  gradcheck([](auto& in) { return in[0].squeeze() + 1.0f; }, {input({1, 3, 1, 2})});
  gradcheck([](auto& in) { return in[0].flatten(1) * in[0].flatten(1); }, {input({2, 3, 4})});
  gradcheck([](auto& in) { return in[0].narrow(1, 1, 3).reshape({2, 3, 1}) * 3.0f; }, {input({2, 5})});
  gradcheck([](auto& in) { return in[0].expand({2, 3, 4}) * in[1]; }, {input({3, 1}), input({2, 3, 4})});
}

TEST_P(NdTensorTest, BadDimensionsAreErrors) {
  const Tensor x = numbered({2, 3});
  EXPECT_ERROR(x.transpose(0, 2), "Tensor::transpose: dimension 2 is out of range [-2, 1]");
  EXPECT_ERROR(x.permute({0}), "Tensor::permute: 1 dimensions given ([0]) but the tensor has 2 (shape [2, 3])");
  EXPECT_ERROR(x.permute({1, -1}), "Tensor::permute: dimension 1 appears twice in [1, -1]");
  EXPECT_ERROR(x.unsqueeze(3), "Tensor::unsqueeze: dimension 3 is out of range [-3, 2]");
  EXPECT_ERROR(x.squeeze(-3), "Tensor::squeeze: dimension -3 is out of range [-2, 1]");
  EXPECT_ERROR(numbered({2, 3, 4}).flatten(2, 1), "Tensor::flatten: start_dim 2 comes after end_dim 1");
  EXPECT_ERROR(x.reshape({4, -1}), "Tensor::reshape: shape [4, -1] is invalid for a tensor of 6 elements");
  EXPECT_ERROR(x.t().t().t().expand({3, 3}), "cannot expand shape [3, 2] to [3, 3]");
}

// a [..., m, k] @ b [..., k, n] in float64 with broadcast batch dims (both given with their full ranks).
std::vector<double> batched_reference(const Tensor& a, const Tensor& b, Shape* shape) {
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  const Shape a_batch(a.shape().begin(), a.shape().end() - 2), b_batch(b.shape().begin(), b.shape().end() - 2);
  const size_t rank = std::max(a_batch.size(), b_batch.size());
  Shape batch(rank);
  const auto size_at = [rank](const Shape& s, size_t d) {
    return d < rank - s.size() ? int64_t{1} : s[d - (rank - s.size())];
  };
  for (size_t d = 0; d < rank; ++d) batch[d] = std::max(size_at(a_batch, d), size_at(b_batch, d));
  const std::vector<double> av = to_double(a), bv = to_double(b);
  std::vector<double> out;
  std::vector<int64_t> index(rank, 0);
  for (int64_t i = 0; i < numel_of(batch); ++i) {
    int64_t a_matrix = 0, b_matrix = 0;
    for (size_t d = 0; d < rank; ++d) {
      a_matrix = a_matrix * size_at(a_batch, d) + (size_at(a_batch, d) == 1 ? 0 : index[d]);
      b_matrix = b_matrix * size_at(b_batch, d) + (size_at(b_batch, d) == 1 ? 0 : index[d]);
    }
    const std::vector<double> a_i(av.begin() + a_matrix * m * k, av.begin() + (a_matrix + 1) * m * k);
    const std::vector<double> b_i(bv.begin() + b_matrix * k * n, bv.begin() + (b_matrix + 1) * k * n);
    const std::vector<double> product = testing::matmul_reference(a_i, b_i, m, k, n);
    out.insert(out.end(), product.begin(), product.end());
    for (size_t d = rank; d-- > 0;) {
      if (++index[d] < batch[d]) break;
      index[d] = 0;
    }
  }
  *shape = batch;
  shape->insert(shape->end(), {m, n});
  return out;
}

void expect_batched_product(const Tensor& a, const Tensor& b) {
  Shape shape;
  const std::vector<double> expected = batched_reference(a, b, &shape);
  expect_values(matmul(a, b), expected, shape, 1e-5, 1e-5);
}

TEST_P(NdTensorTest, MatmulFollowsTorchsRulesForEveryRank) {
  const Tensor v = numbered({3});
  const Tensor m = numbered({3, 2});
  const Tensor w = numbered({2, 3});
  expect_values(matmul(v, v), {5}, {});                               // 0*0 + 1*1 + 2*2
  expect_values(matmul(v, m), {10, 13}, {2});                         // [1, 3] @ [3, 2], unit dim dropped
  expect_values(matmul(w, v), {5, 14}, {2});                          // [2, 3] @ [3, 1]
  expect_values(matmul(w, m), {10, 13, 28, 40}, {2, 2});
  const Tensor batch = numbered({2, 2, 3});
  expect_values(matmul(batch, v), {5, 14, 23, 32}, {2, 2});           // N-D @ 1-D
  expect_values(matmul(v, numbered({2, 3, 2})), {10, 13, 28, 31}, {2, 2});  // 1-D @ N-D
  expect_batched_product(batch, m);                                   // N-D @ 2-D: one product over all rows
  expect_batched_product(Tensor::randn({2, 3, 4, 5}, device()), Tensor::randn({2, 3, 5, 2}, device()));
  expect_batched_product(Tensor::randn({2, 1, 4, 5}, device()), Tensor::randn({3, 5, 2}, device()));
  expect_batched_product(Tensor::randn({4, 5}, device()), Tensor::randn({2, 3, 5, 6}, device()));
  expect_batched_product(Tensor::randn({3, 1, 4, 5}, device()), Tensor::randn({1, 2, 5, 3}, device()));
}

TEST_P(NdTensorTest, BatchedProductsReadTransposedAndBroadcastOperandsInPlace) {
  // Attention's q @ k^T: a transposed view of the keys, batch dims [2, 3] merging into one stride.
  const Tensor q = Tensor::randn({2, 3, 4, 8}, device());
  const Tensor k = Tensor::randn({2, 3, 5, 8}, device());
  Shape shape;
  const std::vector<double> expected = batched_reference(q, k.transpose(-2, -1).contiguous(), &shape);
  expect_values(matmul(q, k.transpose(-2, -1)), expected, shape, 1e-5, 1e-5);
  // Heads split out of the model dim: [B, T, H, D] permuted to [B, H, T, D] (batch dims that do not merge: copied).
  const Tensor heads = Tensor::randn({2, 4, 3, 8}, device()).permute({0, 2, 1, 3});
  expect_values(matmul(heads, k.transpose(-2, -1)),
                batched_reference(heads.contiguous(), k.transpose(-2, -1).contiguous(), &shape), shape, 1e-5, 1e-5);
  // One matrix for every batch entry: an expand view with batch stride 0.
  const Tensor shared = Tensor::randn({1, 5, 3}, device()).expand({4, 5, 3});
  const Tensor lhs = Tensor::randn({4, 2, 5}, device());
  expect_values(bmm(lhs, shared), batched_reference(lhs, shared.contiguous(), &shape), shape, 1e-5, 1e-5);
  // Empty batches and an empty inner dim (the product is zero).
  EXPECT_EQ(matmul(Tensor::randn({0, 2, 3}, device()), Tensor::randn({3, 4}, device())).shape(), (Shape{0, 2, 4}));
  expect_values(bmm(Tensor::randn({2, 2, 0}, device()), Tensor::randn({2, 0, 3}, device())),
                std::vector<double>(12, 0.0), {2, 2, 3});
}

TEST_P(NdTensorTest, ProductsCarryGradientsBackToEveryOperand) {
  gradcheck([](auto& in) { return matmul(in[0], in[1]); }, {input({2, 3, 4}), input({2, 4, 2})});
  gradcheck([](auto& in) { return matmul(in[0], in[1]); }, {input({2, 1, 3, 4}), input({3, 4, 2})});
  gradcheck([](auto& in) { return matmul(in[0], in[1]); }, {input({2, 3, 4}), input({4, 2})});
  gradcheck([](auto& in) { return matmul(in[0], in[1]); }, {input({3}), input({2, 3, 4})});
  gradcheck([](auto& in) { return matmul(in[0], in[1]); }, {input({2, 3, 4}), input({4})});
  gradcheck([](auto& in) { return matmul(in[0], in[1]); }, {input({4}), input({4})});
  gradcheck([](auto& in) { return matmul(in[0], in[1].transpose(-2, -1)); }, {input({2, 3, 4}), input({2, 5, 4})});
  gradcheck([](auto& in) { return bmm(in[0], in[1]); }, {input({3, 2, 4}), input({3, 4, 5})});
}

TEST_P(NdTensorTest, BadProductsAreErrors) {
  EXPECT_ERROR(matmul(Tensor::scalar(1.0f, device()), numbered({2})),
               "matmul: both arguments need at least 1 dimension, got shapes [] and [2]");
  EXPECT_ERROR(matmul(numbered({2, 3}), numbered({4, 2})),
               "matmul: shapes [2, 3] and [4, 2] cannot be multiplied (3 != 4)");
  EXPECT_ERROR(matmul(numbered({2, 2, 3}), numbered({3, 3, 2})),
               "matmul: the batch dims of [2, 2, 3] and [3, 3, 2] do not broadcast (2 and 3 at batch dim 0)");
  EXPECT_ERROR(bmm(numbered({2, 3}), numbered({2, 3, 4})), "bmm: expected 3-D tensors, got shapes [2, 3] and [2, 3, 4]");
  EXPECT_ERROR(bmm(numbered({2, 2, 3}), numbered({3, 3, 4})), "bmm: batch sizes 2 and 3 differ");
  EXPECT_ERROR(bmm(numbered({2, 2, 3}), numbered({2, 4, 4})), "bmm: shapes [2, 2, 3] and [2, 4, 4] cannot be multiplied");
  EXPECT_ERROR(matmul(numbered({2, 3}), Tensor::arange(3, DType::Int64, device())),
               "matmul: got float32 and int64; expected one dtype");
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(NdTensorTest);

}  // namespace
}  // namespace tandem
