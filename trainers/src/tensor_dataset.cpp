#include "tandem/trainers/tensor_dataset.h"

#include <cstring>

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

void TensorDataset::check_pair(const char* who) const {
  TANDEM_CHECK(tensors_.size() == 2, who, ": the data set holds ", tensors_.size(),
               " tensors but an Example takes two (data and target); row() gives every tensor's row");
}

Example TensorDataset::get(int64_t index) const {
  check_pair("TensorDataset::get");
  std::vector<Tensor> tensors = row(index);
  return {std::move(tensors[0]), std::move(tensors[1])};
}

Example TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  check_pair("TensorDataset::get_batch");
  TANDEM_CHECK(!indices.empty(), "TensorDataset::get_batch: got no indices but expected at least one");
  for (const int64_t index : indices) {
    TANDEM_CHECK(index >= 0 && index < rows_, "TensorDataset::get_batch: index ", index, " but the data set has ",
                 rows_, " rows");
  }
  const auto gather = [&](const Tensor& source) {
    Shape shape = source.shape();
    shape[0] = static_cast<int64_t>(indices.size());
    Tensor batch = Tensor::empty(shape, source.dtype(), source.device());
    // Rows are whole and contiguous in the data set's tensors, whatever the dtype: copied as bytes.
    const size_t row_bytes = static_cast<size_t>(source.numel() / rows_) * element_size(source.dtype());
    const auto* from = static_cast<const char*>(source.data_ptr());
    auto* to = static_cast<char*>(batch.mutable_data_ptr());
    for (size_t i = 0; i < indices.size(); ++i) {
      std::memcpy(to + i * row_bytes, from + static_cast<size_t>(indices[i]) * row_bytes, row_bytes);
    }
    return batch;
  };
  return {gather(tensors_[0]), gather(tensors_[1])};
}

}  // namespace tandem::trainers
