#include "tandem/trainers/table_dataset.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "tandem/core/error.h"

namespace tandem::trainers {

TableDataset::TableDataset(std::vector<std::string> feature_names, std::string target_name,
                           std::vector<double> features, std::vector<double> targets)
    : feature_names(std::move(feature_names)),
      target_name(std::move(target_name)),
      features(std::move(features)),
      targets(std::move(targets)) {}

Example TableDataset::get(int64_t index) const {
  TANDEM_CHECK(index >= 0 && index < rows(), "TableDataset::get: index ", index, " but the data set has ", rows(),
               " rows");
  const auto row = features.begin() + index * num_features();
  const std::vector<float> values(row, row + num_features());
  return {Tensor::from_vector(values, {num_features()}),
          Tensor::from_vector({static_cast<float>(targets[static_cast<size_t>(index)])}, {1})};
}

Example TableDataset::get_batch(const std::vector<int64_t>& indices) const {
  TANDEM_CHECK(!indices.empty(), "TableDataset::get_batch: got no indices but expected at least one");
  const auto n = static_cast<int64_t>(indices.size());
  const int64_t width = num_features();
  Tensor data = Tensor::empty({n, width});
  Tensor target = Tensor::empty({n, 1});
  auto* to_data = static_cast<float*>(data.mutable_data_ptr());
  auto* to_target = static_cast<float*>(target.mutable_data_ptr());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t index = indices[static_cast<size_t>(i)];
    TANDEM_CHECK(index >= 0 && index < rows(), "TableDataset::get_batch: index ", index, " but the data set has ",
                 rows(), " rows");
    const auto row = features.begin() + index * width;
    std::transform(row, row + width, to_data + i * width, [](double value) { return static_cast<float>(value); });
    to_target[i] = static_cast<float>(targets[static_cast<size_t>(index)]);
  }
  return {std::move(data), std::move(target)};
}

TableDataset TableDataset::slice(int64_t start, int64_t count) const {
  TANDEM_CHECK(start >= 0 && count >= 0 && start + count <= rows(), "TableDataset::slice: rows [", start, ", ",
               start + count, ") but the data set has ", rows(), " rows");
  const int64_t width = num_features();
  TableDataset part{feature_names, target_name, {}, {}};
  part.features.assign(features.begin() + start * width, features.begin() + (start + count) * width);
  part.targets.assign(targets.begin() + start, targets.begin() + start + count);
  return part;
}

namespace {

// The index of the column `name`; Error naming `what` and listing the columns when there is none.
int64_t column_index(const CsvTable& table, const std::string& name, const char* what) {
  for (size_t c = 0; c < table.columns.size(); ++c) {
    if (table.columns[c] == name) return static_cast<int64_t>(c);
  }
  std::string names;
  for (const std::string& column : table.columns) names += (names.empty() ? "" : ", ") + column;
  TANDEM_FAIL("make_dataset: ", what, " column \"", excerpt(name),
              "\" is not in the table (columns: ", excerpt(names, 400), ")");
}

}  // namespace

TableDataset make_dataset(const CsvTable& table, const std::optional<std::string>& target,
                          const std::vector<std::string>& features) {
  const int64_t width = static_cast<int64_t>(table.columns.size());
  TANDEM_CHECK(width >= 2, "make_dataset: the table has ", width,
               " columns but expected at least two (features and a target)");
  const int64_t target_column = target ? column_index(table, *target, "target") : width - 1;
  std::vector<int64_t> feature_columns;
  for (const std::string& name : features) {
    const int64_t column = column_index(table, name, "feature");
    TANDEM_CHECK(column != target_column, "make_dataset: feature column \"", excerpt(name),
                 "\" is the target; expected features other than the target");
    TANDEM_CHECK(std::find(feature_columns.begin(), feature_columns.end(), column) == feature_columns.end(),
                 "make_dataset: feature column \"", excerpt(name), "\" is named twice");
    feature_columns.push_back(column);
  }
  if (features.empty()) {
    for (int64_t c = 0; c < width; ++c) {
      if (c != target_column) feature_columns.push_back(c);
    }
  }

  TableDataset data;
  data.target_name = table.columns[target_column];
  for (int64_t c : feature_columns) data.feature_names.push_back(table.columns[c]);
  data.features.reserve(table.rows() * feature_columns.size());
  data.targets.reserve(table.rows());
  for (int64_t r = 0; r < table.rows(); ++r) {
    for (int64_t c : feature_columns) data.features.push_back(table.at(r, c));
    data.targets.push_back(table.at(r, target_column));
  }
  return data;
}

Split train_test_split(const TableDataset& data, double test_fraction) {
  TANDEM_CHECK(test_fraction >= 0.0 && test_fraction < 1.0, "train_test_split: test_fraction is ", test_fraction,
               " but expected a value in [0, 1)");
  const int64_t test_rows = std::llround(test_fraction * static_cast<double>(data.rows()));
  const int64_t train_rows = data.rows() - test_rows;
  TANDEM_CHECK(train_rows >= 1, "train_test_split: test_fraction ", test_fraction, " of ", data.rows(),
               " rows leaves no training rows");
  return Split{data.slice(0, train_rows), data.slice(train_rows, test_rows)};
}

}  // namespace tandem::trainers
