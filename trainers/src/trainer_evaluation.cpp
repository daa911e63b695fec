// The Trainer's evaluation: the model's outputs on data sets (in eval mode, without gradients), read once per epoch
// (Note [One read per epoch]), and the metrics of a regression or a classifier computed from them.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "batched_read.h"
#include "prepared_dataset.h"
#include "tandem/core/error.h"
#include "tandem/core/grad_mode.h"
#include "tandem/core/ops.h"
#include "tandem/nn/training_mode_guard.h"
#include "tandem/trainers/trainer.h"

namespace tandem::trainers {
namespace {

// Predictions in batches of this many rows (no gradients, so the size only bounds memory).
constexpr int64_t kPredictBatch = 65536;

}  // namespace

std::vector<Tensor> Trainer::resident_features(const TableDataset& data) const {
  std::vector<Tensor> features;
  if (data.rows() == 0) return features;
  const TableDataset standardized = standardizer_->apply(data);
  DataLoader loader(standardized, kPredictBatch, /*shuffle=*/false, 0);  // refers to `standardized`
  loader.begin_epoch();
  for (int64_t b = 0; b < loader.num_batches(); ++b) {
    features.push_back(for_evaluation(loader.batch(b).features, b * kPredictBatch));
  }
  return features;
}

// TrainerOptions::eval_transform of rows first, first + 1, ... of a set, on devices[0].
Tensor Trainer::for_evaluation(const Tensor& features, int64_t first) const {
  if (options_.eval_transform == nullptr) return features.to(options_.devices.front());
  std::vector<int64_t> indices(static_cast<size_t>(features.size(0)));
  std::iota(indices.begin(), indices.end(), first);
  return options_.eval_transform->apply(features, indices, 0).to(options_.devices.front());
}

Trainer::EvaluationSet Trainer::evaluation_set(const detail::PreparedDataset& data) const {
  EvaluationSet set;
  const int64_t size = data.size();
  for (int64_t first = 0; first < size; first += kPredictBatch) {
    std::vector<int64_t> indices(static_cast<size_t>(std::min(kPredictBatch, size - first)));
    std::iota(indices.begin(), indices.end(), first);
    const Example raw = data.data().get_batch(indices);
    set.features.push_back(for_evaluation(data.data_of(raw.data), first));
    for (const double target : data.targets_of(raw.target, first)) {
      set.targets.push_back(classifier() ? static_cast<double>(options_.classes.index_of(target)) : target);
    }
  }
  return set;
}

Tensor Trainer::model_outputs(const std::vector<Tensor>& features, int64_t width, const char* who) const {
  NoGradGuard no_grad;
  nn::TrainingModeGuard eval_mode(*model_, /*training=*/false);
  std::vector<Tensor> parts;
  for (const Tensor& batch : features) {
    const Tensor output = model_->forward(batch);
    const int64_t rows = batch.size(0);
    const bool fits =
        width == 1 ? output.numel() == rows : output.dim() == 2 && output.size(0) == rows && output.size(1) == width;
    TANDEM_CHECK(fits, who, ": the model's output has shape ", to_string(output.shape()), " for ", rows,
                 " rows but expected ",
                 width == 1 ? "one value per row" : "[rows, " + std::to_string(width) + "] (a score per class)");
    parts.push_back(output.contiguous().reshape({output.numel()}));
  }
  if (parts.empty()) return Tensor::zeros({0}, options_.devices.front());
  return parts.size() == 1 ? parts.front() : cat(parts);
}

int64_t Trainer::output_width() const { return classifier() ? options_.classes.size() : 1; }

// Note [One read per epoch]: the host waits for the devices once per epoch. Its steps only queue work (Note [Losses
// read once per epoch] in callback.h); at its end read_epoch_end issues on devices[0] the global sum of the losses
// (an all-reduce under a group of several processes), each parameter's sum (finite exactly when all its values are)
// and the evaluation's forward on the sets' standardized features, which fit uploaded once before its clock, then
// reads all of it with one BatchedRead. The host then checks, in the order they always were, the losses (naming the
// first bad step), the parameters (naming the first non-finite one), and only then computes the metrics: the same
// values and messages as separate reads would give, the same bytes on CPU devices.
Trainer::EpochValues Trainer::read_epoch_end(const Tensor& losses, bool parameters, const EvaluationSet* train,
                                             const EvaluationSet* test) const {
  BatchedRead reads(options_.devices.front());
  const auto add = [&](const Tensor& values) { return std::optional<size_t>(reads.add(values)); };
  const std::optional<size_t> loss_index = losses.defined() ? add(global_sum(losses)) : std::nullopt;
  std::optional<size_t> sums_index;
  if (parameters) {
    NoGradGuard no_grad;
    std::vector<Tensor> sums;  // each parameter's sum: finite exactly when all its values are
    for (const auto& [name, parameter] : model_->named_parameters()) sums.push_back(sum(parameter).reshape({1}));
    sums_index = add(cat(sums));
  }
  const char* who = "Trainer::fit";
  const std::optional<size_t> train_index =
      train ? add(model_outputs(train->features, output_width(), who)) : std::nullopt;
  const std::optional<size_t> test_index =
      test ? add(model_outputs(test->features, output_width(), who)) : std::nullopt;
  reads.read();
  EpochValues values;
  if (loss_index) values.losses = reads.values(*loss_index);
  if (sums_index) values.parameter_sums = reads.values(*sums_index);
  if (train_index) values.train_outputs = reads.values(*train_index);
  if (test_index) values.test_outputs = reads.values(*test_index);
  return values;
}

std::vector<float> Trainer::read_outputs(const TableDataset& data, const char* who) const {
  if (data.rows() == 0) return {};
  BatchedRead reads(options_.devices.front());
  const size_t index = reads.add(model_outputs(resident_features(data), output_width(), who));
  reads.read();
  return reads.values(index);
}

RegressionMetrics Trainer::regression_metrics_of(const std::vector<float>& outputs,
                                                 const std::vector<double>& targets) const {
  std::vector<double> predictions;
  predictions.reserve(outputs.size());
  for (float value : outputs) predictions.push_back(standardizer_->target_to_original(value));
  return regression_metrics(predictions, targets);
}

ClassificationMetrics Trainer::class_metrics(const std::vector<float>& scores,
                                             const std::vector<double>& class_indices) const {
  return classification_metrics(scores, std::vector<int64_t>(class_indices.begin(), class_indices.end()),
                                options_.classes.size());
}

std::vector<double> Trainer::predict(const TableDataset& data) const {
  TANDEM_CHECK(standardizer_.has_value(), "Trainer::predict: no standardization yet; call fit() or load_checkpoint()",
               " first");
  const std::vector<float> outputs = read_outputs(data, "Trainer::predict");
  std::vector<double> predictions;
  if (!classifier()) {
    for (float value : outputs) predictions.push_back(standardizer_->target_to_original(value));
    return predictions;
  }
  const int64_t classes = options_.classes.size();
  for (size_t row = 0; row < outputs.size(); row += classes) {
    const auto first = outputs.begin() + static_cast<std::ptrdiff_t>(row);
    const int64_t best = std::max_element(first, first + classes) - first;
    predictions.push_back(static_cast<double>(options_.classes.labels()[best]));
  }
  return predictions;
}

RegressionMetrics Trainer::evaluate(const TableDataset& data) const {
  TANDEM_CHECK(!classifier(), "Trainer::evaluate: the task is classification; use evaluate_classes");
  TANDEM_CHECK(data.rows() >= 1, "Trainer::evaluate: the data set has no rows");
  TANDEM_CHECK(standardizer_.has_value(), "Trainer::evaluate: no standardization yet; call fit() or ",
               "load_checkpoint() first");
  return regression_metrics_of(read_outputs(data, "Trainer::predict"), data.targets);
}

ClassificationMetrics Trainer::evaluate_classes(const TableDataset& data) const {
  TANDEM_CHECK(classifier(), "Trainer::evaluate_classes: the task is regression; use evaluate");
  TANDEM_CHECK(data.rows() >= 1, "Trainer::evaluate_classes: the data set has no rows");
  TANDEM_CHECK(standardizer_.has_value(), "Trainer::evaluate_classes: no standardization yet; call fit() or ",
               "load_checkpoint() first");
  const TableDataset encoded = options_.classes.encode(data);
  return class_metrics(read_outputs(encoded, "Trainer::evaluate_classes"), encoded.targets);
}

}  // namespace tandem::trainers
