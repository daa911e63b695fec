#pragma once
// Dataset: what a loader reads examples from, as PyTorch's map-style torch.utils.data.Dataset: size() examples, each
// one got by its index. TableDataset (the CSV data, table_dataset.h) and TensorDataset (tensor_dataset.h) implement
// it; a user's data set (images decoded on demand, tokens cut from a text) derives from it.
//
//   class Squares : public trainers::Dataset {
//    public:
//     int64_t size() const override { return 100; }
//     trainers::Example get(int64_t i) const override {
//       return {Tensor::full({1}, float(i)), Tensor::full({1}, float(i * i))};
//     }
//   };
//   trainers::Example batch = squares.collate({squares.get(3), squares.get(7)});   // data [2, 1], target [2, 1]
//
// get() and get_batch() may be called from several threads at once (a loader's workers): they must not change shared
// state.

#include <cstdint>
#include <vector>

#include "tandem/core/tensor.h"

namespace tandem::trainers {

// One example, or a batch of them (collate's result): the model's input and the target its output is compared with.
struct Example {
  Tensor data;
  Tensor target;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // Example `index`, 0 <= index < size(), as host tensors.
  virtual Example get(int64_t index) const = 0;
  // The examples as one batch: by default every data tensor stacked along a new dimension 0, and every target
  // likewise, as PyTorch's default_collate stacks tensors. Errors: no examples; an undefined tensor, or one of
  // another shape or dtype than example 0's (naming the example).
  virtual Example collate(const std::vector<Example>& examples) const;
  // Examples indices[0], indices[1], ... as one batch, what a loader asks for (as PyTorch's __getitems__): by
  // default collate() of get() of each. A data set that reads many examples at once faster (TensorDataset,
  // TableDataset: rows copied straight into the batch) overrides it with the same result. Errors: no indices; get()'s
  // and collate()'s.
  virtual Example get_batch(const std::vector<int64_t>& indices) const;

 protected:
  Dataset() = default;
  Dataset(const Dataset&) = default;
  Dataset& operator=(const Dataset&) = default;
  Dataset(Dataset&&) = default;
  Dataset& operator=(Dataset&&) = default;
};

}  // namespace tandem::trainers
