#pragma once
// Regression metrics computed in float64 on the host.

#include <cstdint>
#include <vector>

namespace tandem::trainers {

struct RegressionMetrics {
  double mse = 0.0;  // mean of squared errors
  double r2 = 0.0;   // 1 - SSE / SST, SST taken about the mean of the targets (1 for a perfect fit of constant
                     // targets, 0 for an imperfect one)
  int64_t rows = 0;
};

// predictions and targets: equal lengths, at least one value.
RegressionMetrics regression_metrics(const std::vector<double>& predictions, const std::vector<double>& targets);

}  // namespace tandem::trainers
