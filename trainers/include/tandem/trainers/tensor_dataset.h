#pragma once
// TensorDataset: a data set of host tensors whose rows go together, as PyTorch's torch.utils.data.TensorDataset: row
// i of the data set is row i (along dim 0) of every tensor, whatever their dtypes (float32 features, int64 labels,
// bfloat16 inputs). DataLoader (loader.h) batches it. As a Dataset of two tensors, example i is
// {data: row i of the first, target: row i of the second}.
//
//   TensorDataset data({features, labels});  // [1000, 16] float32 and [1000] int64, on the CPU
//   std::vector<Tensor> row = data.row(3);   // {features row 3 ([16]), labels row 3 ([])}
//   Example example = data.get(3);           // the same two, as data and target

#include <cstdint>
#include <vector>

#include "tandem/core/tensor.h"
#include "tandem/trainers/dataset.h"

namespace tandem::trainers {

class TensorDataset : public Dataset {
 public:
  // Keeps contiguous, detached handles of `tensors` (no copy for a contiguous tensor: writing its values later
  // changes the data set). Errors: no tensors; a tensor that is undefined, not on a CPU device or 0-dim (naming its
  // index); tensors with different numbers of rows (naming the two indices and their shapes).
  explicit TensorDataset(std::vector<Tensor> tensors);

  int64_t rows() const { return rows_; }
  int64_t size() const override { return rows_; }  // the rows: one example each
  const std::vector<Tensor>& tensors() const { return tensors_; }

  // Row `index` of every tensor: views of shape tensors()[t].shape() without dim 0. Errors: index outside [0, rows).
  std::vector<Tensor> row(int64_t index) const;
  // Row `index` of the two tensors as {data, target}. Errors: as row(); a data set of other than two tensors.
  Example get(int64_t index) const override;
  // Rows `indices` of the two tensors as {data, target}, each a new contiguous tensor whose rows are copied as bytes
  // (any dtype): get()'s rows stacked. Errors: as get(); no indices.
  Example get_batch(const std::vector<int64_t>& indices) const override;

 private:
  void check_pair(const char* who) const;  // Errors: other than two tensors

  std::vector<Tensor> tensors_;
  int64_t rows_ = 0;
};

}  // namespace tandem::trainers
