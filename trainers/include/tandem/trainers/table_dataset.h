#pragma once
// TableDataset: a table of feature rows and one target per row held on the host in float64 (a CSV file's rows,
// make_dataset): a regression's targets, or a classifier's labels. As a Dataset, example i is its features (float32
// [num_features]) and its target (float32 [1]), the float32 values the Trainer's loader gives.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tandem/trainers/csv.h"
#include "tandem/trainers/dataset.h"

namespace tandem::trainers {

struct TableDataset : Dataset {
  TableDataset() = default;
  TableDataset(std::vector<std::string> feature_names, std::string target_name, std::vector<double> features,
               std::vector<double> targets);

  std::vector<std::string> feature_names;
  std::string target_name;
  std::vector<double> features;  // row-major, rows() x num_features()
  std::vector<double> targets;   // one per row

  int64_t rows() const { return static_cast<int64_t>(targets.size()); }
  int64_t num_features() const { return static_cast<int64_t>(feature_names.size()); }
  double feature(int64_t row, int64_t column) const { return features[row * feature_names.size() + column]; }
  // Rows [start, start + count) as a new data set.
  TableDataset slice(int64_t start, int64_t count) const;

  int64_t size() const override { return rows(); }
  // Row `index`: its features as float32 [num_features()] and its target as float32 [1]. Errors: index outside
  // [0, rows()).
  Example get(int64_t index) const override;
  // The rows at `indices` as features float32 [n, num_features()] and targets float32 [n, 1], get()'s values
  // written straight into the batch. Errors: no indices; an index outside [0, rows()).
  Example get_batch(const std::vector<int64_t>& indices) const override;
};

// `target` names the target column; without it the last column is the target. `features` names the feature
// columns, in the order the data set keeps them; empty: every column but the target, in the table's order.
// Throws Error when the table has fewer than two columns, or a name is not a column (listing the columns), and when
// a feature is named twice or is the target.
TableDataset make_dataset(const CsvTable& table, const std::optional<std::string>& target = std::nullopt,
                          const std::vector<std::string>& features = {});

// Deterministic split: the last round(test_fraction * rows) rows are the test set, the rest (in order) the
// training set. test_fraction must lie in [0, 1) and leave at least one training row.
struct Split {
  TableDataset train;
  TableDataset test;
};
Split train_test_split(const TableDataset& data, double test_fraction);

}  // namespace tandem::trainers
