#pragma once
// PreparedDataset: a user's Dataset as the Trainer trains on it (Trainer::fit over any Dataset): each example's data
// standardized element by element when the statistics ask for it, and its target, one value per example, turned into
// what the loss compares with: a regression's standardized target as float32 [1], a classifier's class index as
// int64 [1].

#include <cstdint>
#include <vector>

#include "tandem/trainers/classification.h"
#include "tandem/trainers/dataset.h"
#include "tandem/trainers/standardize.h"

namespace tandem::trainers::detail {

class PreparedDataset : public Dataset {
 public:
  // Keeps references to all three (classes null for a regression), which must outlive it.
  PreparedDataset(const Dataset& data, const Standardizer& standardizer, const ClassLabels* classes);

  int64_t size() const override { return data_.size(); }
  Example get(int64_t index) const override;
  // The examples' prepared data (data_of) and targets, [n, 1]: float32 standardized targets, or int64 class indices
  // for a classifier. Errors: those of data_of and targets_of.
  Example get_batch(const std::vector<int64_t>& indices) const override;

  // A batch of the data set's data as the model sees it: as it is when the statistics leave the features alone (any
  // dtype), otherwise (x - mean) / scale per element in float64, rounded to float32. Errors: a batch whose examples
  // do not have the statistics' number of elements.
  Tensor data_of(const Tensor& data) const;
  // A batch of targets as the metrics compare with: a regression's in their units, a classifier's class indices.
  // Errors: not one value per example (naming the example `first` of the batch starts at); a classifier's value
  // that is not one of the labels.
  std::vector<double> targets_of(const Tensor& target, int64_t first) const;
  const Dataset& data() const { return data_; }

 private:
  Tensor class_indices(const std::vector<double>& targets) const;  // int64 [n, 1]; Errors: ClassLabels::index_of's
  Tensor standardized(const std::vector<double>& targets) const;   // float32 [n, 1]

  const Dataset& data_;
  const Standardizer& standardizer_;
  const ClassLabels* classes_;
  bool standardizes_features_;
};

}  // namespace tandem::trainers::detail
