#include "prepared_dataset.h"

#include <algorithm>

#include "tandem/core/error.h"

namespace tandem::trainers::detail {

PreparedDataset::PreparedDataset(const Dataset& data, const Standardizer& standardizer, const ClassLabels* classes)
    : data_(data),
      standardizer_(standardizer),
      classes_(classes),
      standardizes_features_(std::any_of(standardizer.feature_mean.begin(), standardizer.feature_mean.end(),
                                         [](double mean) { return mean != 0.0; }) ||
                             std::any_of(standardizer.feature_scale.begin(), standardizer.feature_scale.end(),
                                         [](double scale) { return scale != 1.0; })) {}

Example PreparedDataset::get(int64_t index) const {
  Example batch = get_batch({index});
  const auto drop_rows = [](const Tensor& t) { return t.reshape(Shape(t.shape().begin() + 1, t.shape().end())); };
  return {drop_rows(batch.data), drop_rows(batch.target)};
}

Example PreparedDataset::get_batch(const std::vector<int64_t>& indices) const {
  const Example raw = data_.get_batch(indices);
  const std::vector<double> targets = targets_of(raw.target, indices.front());
  return {data_of(raw.data), classes_ != nullptr ? class_indices(targets) : standardized(targets)};
}

Tensor PreparedDataset::class_indices(const std::vector<double>& targets) const {
  std::vector<int64_t> indices;
  indices.reserve(targets.size());
  for (const double target : targets) indices.push_back(classes_->index_of(target));
  return Tensor::from_vector(indices, {static_cast<int64_t>(indices.size()), 1});
}

Tensor PreparedDataset::standardized(const std::vector<double>& targets) const {
  std::vector<float> values;
  values.reserve(targets.size());
  for (const double target : targets)
    values.push_back(static_cast<float>((target - standardizer_.target_mean) / standardizer_.target_scale));
  return Tensor::from_vector(values, {static_cast<int64_t>(values.size()), 1});
}

Tensor PreparedDataset::data_of(const Tensor& data) const {
  if (!standardizes_features_) return data;
  const int64_t rows = data.size(0);
  const auto width = static_cast<int64_t>(standardizer_.feature_mean.size());
  TANDEM_CHECK(data.numel() == rows * width, "Trainer::fit: an example's data has ", rows > 0 ? data.numel() / rows : 0,
               " elements but the standardization is for ", width);
  const std::vector<float> in = data.to(DType::Float32).to_vector();
  std::vector<float> out(in.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t f = 0; f < width; ++f) {
      const size_t at = static_cast<size_t>(r * width + f);
      out[at] = static_cast<float>((static_cast<double>(in[at]) - standardizer_.feature_mean[f]) /
                                   standardizer_.feature_scale[f]);
    }
  }
  return Tensor::from_vector(out, data.shape());
}

std::vector<double> PreparedDataset::targets_of(const Tensor& target, int64_t first) const {
  const int64_t rows = target.dim() == 0 ? 1 : target.size(0);
  TANDEM_CHECK(target.numel() == rows, "Trainer::fit: example ", first, "'s target has shape ",
               tandem::to_string(Shape(target.shape().begin() + 1, target.shape().end())),
               " but the Trainer's tasks take one value per example (a regression's target, a classifier's label)");
  std::vector<double> values;
  if (target.dtype() == DType::Int64) {
    for (const int64_t value : target.to_vector_as<int64_t>()) values.push_back(static_cast<double>(value));
  } else {
    for (const float value : target.to(DType::Float32).to_vector()) values.push_back(value);
  }
  return values;
}

}  // namespace tandem::trainers::detail
