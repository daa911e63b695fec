#include <cstdint>
#include <vector>

#include "support/test_support.h"

namespace tandem::trainers {
namespace {

TEST(TensorDataset, RowsOfTensorsOfEveryDtype) {
  const Tensor features = Tensor::from_vector({0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32}, {4, 3});
  const std::vector<int64_t> label_values = {5, (int64_t{1} << 53) + 1, -7, 0};
  const Tensor labels = Tensor::from_vector(label_values, {4});
  const Tensor halves =
      Tensor::from_vector({0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f, 6.5f, 7.5f}, {4, 2, 1}).to(DType::BFloat16);
  const TensorDataset data({features, labels, halves});
  EXPECT_EQ(data.rows(), 4);
  EXPECT_EQ(data.size(), 4);
  ASSERT_EQ(data.tensors().size(), 3u);

  const std::vector<Tensor> row = data.row(1);
  ASSERT_EQ(row.size(), 3u);
  testing::expect_values(row[0], {10, 11, 12}, {3});
  EXPECT_EQ(row[1].shape(), Shape{});
  EXPECT_EQ(row[1].item<int64_t>(), (int64_t{1} << 53) + 1);
  EXPECT_EQ(row[2].dtype(), DType::BFloat16);
  testing::expect_values(row[2].to(DType::Float32), {2.5, 3.5}, {2, 1});
  EXPECT_TRUE(row[0].shares_storage_with(features));  // rows are views
}

TEST(TensorDataset, KeepsContiguousDetachedTensors) {
  Tensor weights = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  weights.set_requires_grad();
  const TensorDataset data({weights.t()});  // [3, 2], not contiguous
  EXPECT_EQ(data.rows(), 3);
  EXPECT_TRUE(data.tensors()[0].is_contiguous());
  EXPECT_FALSE(data.tensors()[0].requires_grad());
  testing::expect_values(data.row(2)[0], {3, 6}, {2});
}

TEST(TensorDataset, BadTensorsAreErrors) {
  EXPECT_ERROR(TensorDataset(std::vector<Tensor>{}), "TensorDataset: got no tensors but expected at least one");
  const Tensor four = Tensor::zeros({4, 3});
  EXPECT_ERROR(TensorDataset({four, Tensor()}), "TensorDataset: tensor 1 is undefined");
  EXPECT_ERROR(TensorDataset({four, Tensor::scalar(1)}),
               "TensorDataset: tensor 1 has shape [] but expected at least one dimension (the rows)");
  EXPECT_ERROR(TensorDataset({four, Tensor::zeros({3, 2})}),
               "TensorDataset: tensor 1 has shape [3, 2] but tensor 0 has shape [4, 3]; expected the same number "
               "of rows (dim 0)");
  const TensorDataset data({four});
  EXPECT_ERROR(data.row(4), "TensorDataset::row: index 4 but the data set has 4 rows");
  EXPECT_ERROR(data.row(-1), "TensorDataset::row: index -1 but the data set has 4 rows");
  if (cuda_device_count() == 0) return;
  EXPECT_ERROR(TensorDataset({four, Tensor::zeros({4}, Device::cuda(0))}),
               "TensorDataset: tensor 1 is on cuda:0 but expected a CPU device");
}

}  // namespace
}  // namespace tandem::trainers
