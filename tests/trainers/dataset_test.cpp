// trainers::Dataset: the examples of TableDataset and TensorDataset, a user's data set, and collate's batches.

#include "tandem/trainers/dataset.h"

#include <cstdint>
#include <memory>
#include <vector>

#include "support/test_support.h"

namespace tandem::trainers {
namespace {

// Example i: data [2] = {i, -i}, target [1] = {i * i}.
class Squares : public Dataset {
 public:
  int64_t size() const override { return 5; }
  Example get(int64_t index) const override {
    const auto i = static_cast<float>(index);
    return {Tensor::from_vector({i, -i}, {2}), Tensor::from_vector({i * i}, {1})};
  }
};

// A collate of its own: the targets summed into one value instead of stacked.
class SummedTargets : public Squares {
 public:
  Example collate(const std::vector<Example>& examples) const override {
    Example batch = Dataset::collate(examples);
    batch.target = sum(batch.target).reshape({1});
    return batch;
  }
};

TEST(Dataset, CollateStacksDataAndTargetsInOrder) {
  const Squares squares;
  const Example batch = squares.collate({squares.get(3), squares.get(1), squares.get(4)});
  testing::expect_values(batch.data, {3, -3, 1, -1, 4, -4}, {3, 2});
  testing::expect_values(batch.target, {9, 1, 16}, {3, 1});
}

TEST(Dataset, AnOverriddenCollateIsTheOneCalledThroughTheInterface) {
  const SummedTargets summed;
  const Dataset& data = summed;
  const Example batch = data.collate({data.get(2), data.get(3)});
  testing::expect_values(batch.data, {2, -2, 3, -3}, {2, 2});
  testing::expect_values(batch.target, {13}, {1});
}

TEST(Dataset, CollateRefusesExamplesThatDoNotStack) {
  const Squares squares;
  EXPECT_ERROR(squares.collate({}), "Dataset::collate: got no examples but expected at least one");
  const Example odd{Tensor::zeros({3}), Tensor::zeros({1})};
  EXPECT_ERROR(squares.collate({squares.get(0), odd}),
               "Dataset::collate: the data of example 1 has shape [3] and dtype float32 but example 0's has [2]");
  const Example int_target{Tensor::zeros({2}), Tensor::zeros({1}, DType::Int64)};
  EXPECT_ERROR(squares.collate({squares.get(0), int_target}), "the target of example 1 has shape [1] and dtype int64");
  EXPECT_ERROR(squares.collate({squares.get(0), Example{Tensor::zeros({2}), Tensor()}}),
               "Dataset::collate: the target of example 1 is undefined");
}

TEST(TableDataset, ExamplesAreItsRowsInFloat32) {
  const TableDataset table({"a", "b"}, "y", {1.5, -2.0, 3.25, 4.0, 0.125, 8.0}, {10.0, 20.5, -1.0});
  const Dataset& data = table;
  EXPECT_EQ(data.size(), 3);
  const Example row = data.get(1);
  testing::expect_values(row.data, {3.25, 4.0}, {2});
  testing::expect_values(row.target, {20.5}, {1});
  EXPECT_EQ(row.data.dtype(), DType::Float32);
  const Example batch = data.collate({data.get(2), data.get(0)});
  testing::expect_values(batch.data, {0.125, 8.0, 1.5, -2.0}, {2, 2});
  testing::expect_values(batch.target, {-1.0, 10.0}, {2, 1});
  EXPECT_ERROR(data.get(3), "TableDataset::get: index 3 but the data set has 3 rows");
  EXPECT_ERROR(data.get(-1), "TableDataset::get: index -1 but the data set has 3 rows");
}

TEST(TensorDataset, ExamplesAreTheRowsOfItsTwoTensors) {
  const TensorDataset pairs(
      {Tensor::from_vector({0, 1, 2, 3, 4, 5}, {3, 2}), Tensor::from_vector(std::vector<int64_t>{7, 8, 9}, {3})});
  const Dataset& data = pairs;
  const Example row = data.get(2);
  testing::expect_values(row.data, {4, 5}, {2});
  EXPECT_EQ(row.target.dtype(), DType::Int64);
  EXPECT_EQ(row.target.item<int64_t>(), 9);
  const Example batch = data.collate({data.get(1), data.get(2)});
  testing::expect_values(batch.data, {2, 3, 4, 5}, {2, 2});
  EXPECT_EQ(batch.target.to_vector_as<int64_t>(), (std::vector<int64_t>{8, 9}));
  const TensorDataset three({Tensor::zeros({3, 2}), Tensor::zeros({3}), Tensor::zeros({3})});
  EXPECT_ERROR(three.get(0), "TensorDataset::get: the data set holds 3 tensors but an Example takes two");
}

}  // namespace
}  // namespace tandem::trainers
