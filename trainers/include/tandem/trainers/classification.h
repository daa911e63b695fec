#pragma once
// Classification on a numeric table: class labels read from the target column, the training loss over class
// scores, and the metrics of a classifier (accuracy, cross-entropy, confusion matrix), computed in float64 on the host.

#include <cstdint>
#include <string>
#include <vector>

#include "tandem/core/tensor.h"
#include "tandem/trainers/table_dataset.h"

namespace tandem::trainers {

// The most classes a target column may hold: far above any table this layer is for.
inline constexpr int64_t kMaxClasses = 10000;
// The most classes a confusion matrix is kept for: 1000^2 counters (8 MB, a few MB of JSON in a summary). Above it
// the matrix is left empty (ClassificationMetrics::confusion), so that an accepted class count never costs
// gigabytes per evaluation.
inline constexpr int64_t kMaxConfusionClasses = 1000;

// The classes of a data set: its distinct target values, each an integer, in increasing order. Class i stands for
// the label labels()[i]; a classifier scores the classes in this order, and its outputs are class indices 0..C-1.
class ClassLabels {
 public:
  ClassLabels() = default;  // no classes (a regression run)
  // Errors: fewer than 2 labels, more than kMaxClasses, labels not strictly increasing.
  explicit ClassLabels(std::vector<int64_t> labels);
  // The labels of `data`'s targets. Errors, naming the target column, the row (1-based among the data rows) and the
  // value: a target that is not an integer or lies beyond +-2^53 (where doubles stop holding every integer); more
  // than max_classes distinct values (naming the first row past the limit); fewer than 2 distinct values.
  static ClassLabels of(const TableDataset& data, int64_t max_classes = kMaxClasses);

  int64_t size() const { return static_cast<int64_t>(labels_.size()); }
  bool empty() const { return labels_.empty(); }
  const std::vector<int64_t>& labels() const { return labels_; }
  // The class of a label value. Errors: a value that is not one of the labels.
  int64_t index_of(double label) const;
  // `data` with every target replaced by its class index. Errors: a target that is not one of the labels, naming
  // the row (1-based) and the value.
  TableDataset encode(const TableDataset& data) const;
  // The labels as "0,1,2" (how checkpoints record the mapping).
  std::string str() const;

  friend bool operator==(const ClassLabels&, const ClassLabels&) = default;

 private:
  int64_t find(double label) const;  // the class of a label value, -1 for none

  std::vector<int64_t> labels_;
};

struct ClassificationMetrics {
  double accuracy = 0.0;       // the fraction of rows whose highest-scoring class is their class
  double cross_entropy = 0.0;  // mean over the rows of -log softmax(scores)[class]
  // confusion[actual][predicted]: rows of class `actual` predicted as `predicted`; C x C, summing to `rows`. Empty
  // for more than kMaxConfusionClasses classes.
  std::vector<std::vector<int64_t>> confusion;
  int64_t rows = 0;
};

// Metrics of class scores (rows x num_classes, row-major; any real scores, e.g. logits) against class indices.
// The predicted class is the first highest score, as argmax. Errors: num_classes < 1; scores not classes.size() *
// num_classes values; no rows; a class outside [0, num_classes).
ClassificationMetrics classification_metrics(const std::vector<float>& scores, const std::vector<int64_t>& classes,
                                             int64_t num_classes);

// The training loss of a classifier: nn::cross_entropy (the mean over the rows of -log softmax(scores)[class]) of
// scores [n, C] and classes [n, 1] (int64 class indices, as the Trainer's loader yields a classifier's targets), on
// one device; differentiable in the scores. Errors: scores that are not [n, C] for the n rows of classes (naming both
// shapes); classes that are not int64 or a class outside [0, C) (nn::cross_entropy's messages: "convert with
// .to(DType::Int64)"; naming the row and value).
Tensor class_cross_entropy(const Tensor& scores, const Tensor& classes);

}  // namespace tandem::trainers
