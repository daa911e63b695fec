#include "tandem/trainers/standardize.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tandem/core/error.h"

namespace tandem::trainers {
namespace {

// Means and population standard deviations of columns in two passes over the same rows in the same order (every value
// added to the sums, then, once the means are known, every value to the squares): the one rule of both fits.
class ColumnMoments {
 public:
  explicit ColumnMoments(size_t columns) : sums_(columns), squares_(columns), means_(columns) {}
  void add_to_sums(size_t column, double value) { sums_[column] += value; }
  void finish_sums(int64_t rows) {
    for (size_t c = 0; c < sums_.size(); ++c) means_[c] = sums_[c] / static_cast<double>(rows);
    rows_ = rows;
  }
  void add_to_squares(size_t column, double value) {
    const double d = value - means_[column];
    squares_[column] += d * d;
  }
  double mean(size_t column) const { return means_[column]; }
  double scale(size_t column) const {  // 1 for a constant column
    const double scale = std::sqrt(squares_[column] / static_cast<double>(rows_));
    return scale > 0.0 ? scale : 1.0;
  }

 private:
  std::vector<double> sums_, squares_, means_;
  int64_t rows_ = 0;
};

// Examples read at once for the statistics of a Dataset.
constexpr int64_t kStatisticsBatch = 4096;

}  // namespace

Standardizer Standardizer::fit(const TableDataset& train, bool standardize_target) {
  TANDEM_CHECK(train.rows() >= 1, "Standardizer::fit: the training set has no rows");
  const auto width = static_cast<size_t>(train.num_features());
  ColumnMoments moments(width + 1);  // the features, then the target
  const auto each_value = [&](auto add) {
    for (int64_t r = 0; r < train.rows(); ++r) {
      for (size_t c = 0; c < width; ++c) add(c, train.features[static_cast<size_t>(r) * width + c]);
      add(width, train.targets[static_cast<size_t>(r)]);
    }
  };
  each_value([&](size_t c, double value) { moments.add_to_sums(c, value); });
  moments.finish_sums(train.rows());
  each_value([&](size_t c, double value) { moments.add_to_squares(c, value); });
  Standardizer s;
  for (size_t c = 0; c < width; ++c) {
    s.feature_mean.push_back(moments.mean(c));
    s.feature_scale.push_back(moments.scale(c));
  }
  if (standardize_target) {
    s.target_mean = moments.mean(width);
    s.target_scale = moments.scale(width);
  }
  return s;
}

Standardizer Standardizer::fit(const Dataset& train, bool standardize_features, bool standardize_target) {
  TANDEM_CHECK(train.size() >= 1, "Standardizer::fit: the training set has no examples");
  const int64_t width = train.get(0).data.numel();
  const auto w = static_cast<size_t>(width);
  if (!standardize_features && !standardize_target) {  // the identity: nothing to read
    return {std::vector<double>(w, 0.0), std::vector<double>(w, 1.0)};
  }
  ColumnMoments moments(w + 1);  // the elements of an example's data, then its target
  const auto each_value = [&](auto add) {
    for (int64_t first = 0; first < train.size(); first += kStatisticsBatch) {
      std::vector<int64_t> indices(static_cast<size_t>(std::min(kStatisticsBatch, train.size() - first)));
      std::iota(indices.begin(), indices.end(), first);
      const Example batch = train.get_batch(indices);
      const auto rows = static_cast<int64_t>(indices.size());
      TANDEM_CHECK(batch.data.numel() == rows * width && batch.target.numel() == rows, "Standardizer::fit: the ",
                   "examples from ", first, " have data of ", batch.data.numel() / rows, " elements and targets of ",
                   batch.target.numel() / rows, " but example 0 has ", width,
                   " and the statistics take one target per example");
      const std::vector<float> data = batch.data.to(DType::Float32).contiguous().to_vector();
      const std::vector<float> targets = batch.target.to(DType::Float32).contiguous().to_vector();
      for (size_t r = 0; r < indices.size(); ++r) {
        for (size_t c = 0; c < w; ++c) add(c, data[r * w + c]);
        add(w, targets[r]);
      }
    }
  };
  each_value([&](size_t c, double value) { moments.add_to_sums(c, value); });
  moments.finish_sums(train.size());
  each_value([&](size_t c, double value) { moments.add_to_squares(c, value); });
  Standardizer s;
  for (size_t c = 0; c < w; ++c) {
    s.feature_mean.push_back(standardize_features ? moments.mean(c) : 0.0);
    s.feature_scale.push_back(standardize_features ? moments.scale(c) : 1.0);
  }
  if (standardize_target) {
    s.target_mean = moments.mean(w);
    s.target_scale = moments.scale(w);
  }
  return s;
}

TableDataset Standardizer::apply(const TableDataset& data) const {
  const int64_t width = data.num_features();
  TANDEM_CHECK(width == static_cast<int64_t>(feature_mean.size()) && feature_mean.size() == feature_scale.size(),
               "Standardizer::apply: the data set has ", width, " features but the statistics are for ",
               feature_mean.size(), " (means) and ", feature_scale.size(), " (scales)");
  TableDataset out = data;
  for (int64_t r = 0; r < data.rows(); ++r) {
    for (int64_t c = 0; c < width; ++c) {
      double& x = out.features[r * width + c];
      x = (x - feature_mean[c]) / feature_scale[c];
    }
    out.targets[r] = (out.targets[r] - target_mean) / target_scale;
  }
  return out;
}

}  // namespace tandem::trainers
