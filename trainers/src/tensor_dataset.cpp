#include "tandem/trainers/tensor_dataset.h"

#include "tandem/core/error.h"

namespace tandem::trainers {

TensorDataset::TensorDataset(std::vector<Tensor> tensors) {
  TANDEM_CHECK(!tensors.empty(), "TensorDataset: got no tensors but expected at least one");
  for (size_t t = 0; t < tensors.size(); ++t) {
    const Tensor& tensor = tensors[t];
    TANDEM_CHECK(tensor.defined(), "TensorDataset: tensor ", t, " is undefined");
    TANDEM_CHECK(tensor.device().is_cpu(), "TensorDataset: tensor ", t, " is on ", tensor.device(),
                 " but expected a CPU device (a loader copies the batches to the devices)");
    TANDEM_CHECK(tensor.dim() >= 1, "TensorDataset: tensor ", t, " has shape ", tandem::to_string(tensor.shape()),
                 " but expected at least one dimension (the rows)");
    TANDEM_CHECK(tensor.size(0) == tensors[0].size(0), "TensorDataset: tensor ", t, " has shape ",
                 tandem::to_string(tensor.shape()), " but tensor 0 has shape ", tandem::to_string(tensors[0].shape()),
                 "; expected the same number of rows (dim 0)");
    tensors_.push_back(tensor.detach().contiguous());
  }
  rows_ = tensors_.front().size(0);
}

std::vector<Tensor> TensorDataset::row(int64_t index) const {
  TANDEM_CHECK(index >= 0 && index < rows_, "TensorDataset::row: index ", index, " but the data set has ", rows_,
               " rows");
  std::vector<Tensor> row;
  for (const Tensor& tensor : tensors_) {
    const Shape& shape = tensor.shape();
    row.push_back(tensor.narrow(0, index, 1).view(Shape(shape.begin() + 1, shape.end())));
  }
  return row;
}

Example TensorDataset::get(int64_t index) const {
  TANDEM_CHECK(tensors_.size() == 2, "TensorDataset::get: the data set holds ", tensors_.size(),
               " tensors but an Example takes two (data and target); row() gives every tensor's row");
  std::vector<Tensor> tensors = row(index);
  return {std::move(tensors[0]), std::move(tensors[1])};
}

}  // namespace tandem::trainers
