#include "tandem/trainers/metrics.h"

#include "tandem/core/error.h"

namespace tandem::trainers {

RegressionMetrics regression_metrics(const std::vector<double>& predictions, const std::vector<double>& targets) {
  TANDEM_CHECK(predictions.size() == targets.size(), "regression_metrics: ", predictions.size(), " predictions but ",
               targets.size(), " targets");
  TANDEM_CHECK(!targets.empty(), "regression_metrics: no values");
  const double n = static_cast<double>(targets.size());
  double mean = 0.0;
  for (double t : targets) mean += t;
  mean /= n;
  double sse = 0.0;
  double sst = 0.0;
  for (size_t i = 0; i < targets.size(); ++i) {
    sse += (predictions[i] - targets[i]) * (predictions[i] - targets[i]);
    sst += (targets[i] - mean) * (targets[i] - mean);
  }
  const double r2 = sst > 0.0 ? 1.0 - sse / sst : (sse == 0.0 ? 1.0 : 0.0);
  return RegressionMetrics{sse / n, r2, static_cast<int64_t>(targets.size())};
}

}  // namespace tandem::trainers
