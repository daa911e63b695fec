#pragma once
// Standardization from training statistics: z = (x - mean) / scale per feature, and the same for the target.

#include <vector>

#include "tandem/trainers/dataset.h"
#include "tandem/trainers/table_dataset.h"

namespace tandem::trainers {

struct Standardizer {
  std::vector<double> feature_mean;
  std::vector<double> feature_scale;  // population standard deviation; 1 for a constant column
  double target_mean = 0.0;           // 0 and 1 when the target is left in its units
  double target_scale = 1.0;

  // Statistics of `train` (at least one row). With standardize_target false the target is left as it is.
  static Standardizer fit(const TableDataset& train, bool standardize_target = true);
  // Statistics of any data set whose examples have data of one number of elements (each element a feature, read as
  // float32) and one target value: the same two-pass rule as for a table, over the examples in order. Without
  // standardize_features the feature statistics are the identity (mean 0, scale 1). Errors: no examples; examples of
  // other sizes than example 0, or targets of more than one value.
  static Standardizer fit(const Dataset& train, bool standardize_features, bool standardize_target);
  // Standardizes features and target; the data set must have as many features as the statistics.
  TableDataset apply(const TableDataset& data) const;
  // Back to the target's units: standardized * target_scale + target_mean.
  double target_to_original(double standardized) const { return standardized * target_scale + target_mean; }
};

}  // namespace tandem::trainers
