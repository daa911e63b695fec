#include "tandem/trainers/standardize.h"

#include <cmath>

#include "tandem/core/error.h"

namespace tandem::trainers {
namespace {

struct Moments {
  double mean;
  double scale;
};

// Two-pass mean and population standard deviation of values[start + i * stride], i < count.
Moments moments(const std::vector<double>& values, int64_t start, int64_t stride, int64_t count) {
  double sum = 0.0;
  for (int64_t i = 0; i < count; ++i) sum += values[start + i * stride];
  const double mean = sum / static_cast<double>(count);
  double squares = 0.0;
  for (int64_t i = 0; i < count; ++i) {
    const double d = values[start + i * stride] - mean;
    squares += d * d;
  }
  const double scale = std::sqrt(squares / static_cast<double>(count));
  return {mean, scale > 0.0 ? scale : 1.0};
}

}  // namespace

Standardizer Standardizer::fit(const TableDataset& train, bool standardize_target) {
  TANDEM_CHECK(train.rows() >= 1, "Standardizer::fit: the training set has no rows");
  Standardizer s;
  const int64_t width = train.num_features();
  for (int64_t c = 0; c < width; ++c) {
    Moments m = moments(train.features, c, width, train.rows());
    s.feature_mean.push_back(m.mean);
    s.feature_scale.push_back(m.scale);
  }
  if (standardize_target) {
    Moments m = moments(train.targets, 0, 1, train.rows());
    s.target_mean = m.mean;
    s.target_scale = m.scale;
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
