#include "tandem/trainers/classification.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "tandem/core/error.h"
#include "tandem/core/ops.h"
#include "tandem/nn/loss.h"

namespace tandem::trainers {
namespace {

// Doubles hold every integer below 2^53 exactly, and no other integer rounds to one of them; 2^53 itself is also
// what 2^53 + 1 rounds to, so a label must lie strictly below it.
constexpr double kLabelBound = 9007199254740992.0;

std::string label_text(double value) {
  std::ostringstream out;
  out.precision(17);
  out << value;
  return out.str();
}

}  // namespace

ClassLabels::ClassLabels(std::vector<int64_t> labels) : labels_(std::move(labels)) {
  TANDEM_CHECK(size() >= 2 && size() <= kMaxClasses, "ClassLabels: ", size(), " labels but expected 2 to ",
               kMaxClasses);
  for (size_t i = 1; i < labels_.size(); ++i) {
    TANDEM_CHECK(labels_[i - 1] < labels_[i], "ClassLabels: labels ", labels_[i - 1], " then ", labels_[i],
                 " at positions ", i - 1, " and ", i, " but expected them strictly increasing");
  }
}

ClassLabels ClassLabels::of(const TableDataset& data, int64_t max_classes) {
  TANDEM_CHECK(max_classes >= 2 && max_classes <= kMaxClasses, "ClassLabels::of: max_classes is ", max_classes,
               " but expected 2 to ", kMaxClasses);
  std::set<int64_t> seen;
  for (int64_t r = 0; r < data.rows(); ++r) {
    const double value = data.targets[r];
    TANDEM_CHECK(std::isfinite(value) && value == std::trunc(value) && std::abs(value) < kLabelBound,
                 "ClassLabels::of: target \"", excerpt(data.target_name), "\" is ", label_text(value), " in row ",
                 r + 1, " but a class label must be an integer below 2^53 in magnitude");
    seen.insert(static_cast<int64_t>(value));
    TANDEM_CHECK(static_cast<int64_t>(seen.size()) <= max_classes, "ClassLabels::of: target \"",
                 excerpt(data.target_name), "\" has more than ", max_classes, " distinct values (row ", r + 1,
                 " holds another one, ", label_text(value), "); is it a regression target?");
  }
  TANDEM_CHECK(seen.size() >= 2, "ClassLabels::of: target \"", excerpt(data.target_name), "\" has ", seen.size(),
               " distinct value", seen.size() == 1 ? "" : "s", " in ", data.rows(),
               " rows but a classification needs at least 2 classes");
  return ClassLabels(std::vector<int64_t>(seen.begin(), seen.end()));
}

int64_t ClassLabels::find(double label) const {
  const auto found = std::lower_bound(labels_.begin(), labels_.end(), label,
                                      [](int64_t known, double value) { return static_cast<double>(known) < value; });
  return found != labels_.end() && static_cast<double>(*found) == label ? found - labels_.begin() : -1;
}

int64_t ClassLabels::index_of(double label) const {
  const int64_t index = find(label);
  TANDEM_CHECK(index >= 0, "ClassLabels::index_of: ", label_text(label), " is not one of the ", size(),
               " class labels (", excerpt(str()), ")");
  return index;
}

TableDataset ClassLabels::encode(const TableDataset& data) const {
  TANDEM_CHECK(!empty(), "ClassLabels::encode: no classes");
  TableDataset encoded = data;
  for (int64_t r = 0; r < data.rows(); ++r) {
    const int64_t index = find(data.targets[r]);
    TANDEM_CHECK(index >= 0, "ClassLabels::encode: target \"", excerpt(data.target_name), "\" is ",
                 label_text(data.targets[r]), " in row ", r + 1, " but expected one of the ", size(), " class labels (",
                 excerpt(str()), ")");
    encoded.targets[r] = static_cast<double>(index);
  }
  return encoded;
}

std::string ClassLabels::str() const {
  std::string text;
  for (int64_t label : labels_) {
    if (!text.empty()) text += ',';
    text += std::to_string(label);
  }
  return text;
}

ClassificationMetrics classification_metrics(const std::vector<float>& scores, const std::vector<int64_t>& classes,
                                             int64_t num_classes) {
  TANDEM_CHECK(num_classes >= 1, "classification_metrics: num_classes is ", num_classes, " but expected >= 1");
  TANDEM_CHECK(!classes.empty(), "classification_metrics: no rows");
  TANDEM_CHECK(scores.size() == classes.size() * static_cast<size_t>(num_classes),
               "classification_metrics: ", scores.size(), " scores for ", classes.size(), " rows of ", num_classes,
               " classes but expected ", classes.size() * static_cast<size_t>(num_classes));
  ClassificationMetrics metrics;
  metrics.rows = static_cast<int64_t>(classes.size());
  const bool confusion = num_classes <= kMaxConfusionClasses;
  if (confusion) metrics.confusion.assign(num_classes, std::vector<int64_t>(num_classes, 0));
  int64_t correct = 0;
  double loss = 0.0;
  for (size_t r = 0; r < classes.size(); ++r) {
    const int64_t actual = classes[r];
    TANDEM_CHECK(actual >= 0 && actual < num_classes, "classification_metrics: row ", r + 1, " has class ", actual,
                 " but expected one in [0, ", num_classes, ")");
    const float* row = scores.data() + r * num_classes;
    const int64_t predicted = std::max_element(row, row + num_classes) - row;  // the first highest
    double sum = 0.0;  // log-sum-exp about the highest score, which keeps exp() from overflowing
    for (int64_t c = 0; c < num_classes; ++c) sum += std::exp(static_cast<double>(row[c]) - row[predicted]);
    loss += std::log(sum) + row[predicted] - row[actual];
    correct += predicted == actual;
    if (confusion) ++metrics.confusion[actual][predicted];
  }
  metrics.accuracy = static_cast<double>(correct) / static_cast<double>(metrics.rows);
  metrics.cross_entropy = loss / static_cast<double>(metrics.rows);
  return metrics;
}

Tensor class_cross_entropy(const Tensor& scores, const Tensor& classes) {
  TANDEM_CHECK(scores.dim() == 2 && classes.dim() == 2 && classes.size(1) == 1 && scores.size(0) == classes.size(0),
               "class_cross_entropy: scores of shape ", to_string(scores.shape()), " and classes of shape ",
               to_string(classes.shape()), " but expected [n, classes] and [n, 1]");
  // nn::cross_entropy takes the classes as [n] and checks their dtype and each value against the number of scores.
  return nn::cross_entropy(scores, classes.reshape({classes.size(0)}));
}

}  // namespace tandem::trainers
