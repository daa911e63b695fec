#include "tandem/trainers/dataset.h"

#include <cmath>

#include "tandem/core/error.h"

namespace tandem::trainers {

Dataset Dataset::slice(int64_t start, int64_t count) const {
  TANDEM_CHECK(start >= 0 && count >= 0 && start + count <= rows(), "Dataset::slice: rows [", start, ", ",
               start + count, ") but the data set has ", rows(), " rows");
  const int64_t width = num_features();
  Dataset part{feature_names, target_name, {}, {}};
  part.features.assign(features.begin() + start * width, features.begin() + (start + count) * width);
  part.targets.assign(targets.begin() + start, targets.begin() + start + count);
  return part;
}

Dataset make_dataset(const CsvTable& table, const std::optional<std::string>& target) {
  const int64_t width = static_cast<int64_t>(table.columns.size());
  TANDEM_CHECK(width >= 2, "make_dataset: the table has ", width,
               " columns but expected at least two (features and a target)");
  int64_t target_column = width - 1;
  if (target) {
    std::string names;
    for (const std::string& name : table.columns) names += (names.empty() ? "" : ", ") + name;
    target_column = -1;
    for (int64_t c = 0; c < width; ++c) {
      if (table.columns[c] == *target) target_column = c;
    }
    TANDEM_CHECK(target_column >= 0, "make_dataset: target column \"", *target, "\" is not in the table (columns: ",
                 names, ")");
  }

  Dataset data;
  data.target_name = table.columns[target_column];
  for (int64_t c = 0; c < width; ++c) {
    if (c != target_column) data.feature_names.push_back(table.columns[c]);
  }
  data.features.reserve(table.rows() * (width - 1));
  data.targets.reserve(table.rows());
  for (int64_t r = 0; r < table.rows(); ++r) {
    for (int64_t c = 0; c < width; ++c) {
      (c == target_column ? data.targets : data.features).push_back(table.at(r, c));
    }
  }
  return data;
}

Split train_test_split(const Dataset& data, double test_fraction) {
  TANDEM_CHECK(test_fraction >= 0.0 && test_fraction < 1.0, "train_test_split: test_fraction is ", test_fraction,
               " but expected a value in [0, 1)");
  const int64_t test_rows = std::llround(test_fraction * static_cast<double>(data.rows()));
  const int64_t train_rows = data.rows() - test_rows;
  TANDEM_CHECK(train_rows >= 1, "train_test_split: test_fraction ", test_fraction, " of ", data.rows(),
               " rows leaves no training rows");
  return Split{data.slice(0, train_rows), data.slice(train_rows, test_rows)};
}

}  // namespace tandem::trainers
