// multinomial: category indices drawn from rows of weights, on the host with the calling thread's generator stream.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "raw_ops.h"
#include "tandem/core/error.h"
#include "tandem/core/ops.h"
#include "tandem/core/random.h"

namespace tandem {

namespace {

// Row `row` of the [rows, categories] weights as doubles, checked: every weight finite and non-negative, and at
// least one positive (without replacement, at least num_samples).
std::vector<double> checked_row(const std::vector<float>& weights, int64_t row, int64_t categories, int64_t num_samples,
                                bool replacement) {
  std::vector<double> out(static_cast<size_t>(categories));
  int64_t positive = 0;
  for (int64_t c = 0; c < categories; ++c) {
    const float w = weights[static_cast<size_t>(row * categories + c)];
    TANDEM_CHECK(std::isfinite(w) && w >= 0.0f, "multinomial: row ", row, " has weight ", w, " at category ", c,
                 "; expected non-negative finite weights");
    out[static_cast<size_t>(c)] = w;
    positive += w > 0.0f;
  }
  TANDEM_CHECK(positive > 0, "multinomial: row ", row, " has no positive weight");
  TANDEM_CHECK(replacement || num_samples <= positive, "multinomial: without replacement, num_samples (", num_samples,
               ") must be at most the number of positive weights (", positive, ") in row ", row);
  return out;
}

// The category whose slice [cumulative[c - 1], cumulative[c]) of [0, total) holds u * total, for u in [0, 1):
// categories of weight 0 have empty slices and are never chosen. Where rounding makes u * total reach total, the
// last category of positive weight.
int64_t category_at(const std::vector<double>& cumulative, double u) {
  const double total = cumulative.back();
  auto chosen = std::upper_bound(cumulative.begin(), cumulative.end(), u * total);
  if (chosen == cumulative.end()) chosen = std::lower_bound(cumulative.begin(), cumulative.end(), total);
  return chosen - cumulative.begin();
}

// num_samples categories of one row, drawn with the uniforms u[0, num_samples); without replacement each chosen
// category's weight becomes 0 before the next draw.
void sample_row(std::vector<double> weights, const double* u, int64_t num_samples, bool replacement, int64_t* out) {
  std::vector<double> cumulative(weights.size());
  std::partial_sum(weights.begin(), weights.end(), cumulative.begin());
  for (int64_t s = 0; s < num_samples; ++s) {
    out[s] = category_at(cumulative, u[s]);
    if (replacement) continue;
    weights[static_cast<size_t>(out[s])] = 0.0;
    std::partial_sum(weights.begin(), weights.end(), cumulative.begin());
  }
}

}  // namespace

Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement) {
  raw::check_defined("multinomial", probs);
  raw::check_float32("multinomial", {probs});
  TANDEM_CHECK(probs.dim() == 1 || probs.dim() == 2, "multinomial: expected a 1-D or 2-D tensor of weights, got shape ",
               to_string(probs.shape()));
  TANDEM_CHECK(num_samples > 0, "multinomial: num_samples is ", num_samples, " but expected at least 1");
  const int64_t rows = probs.dim() == 2 ? probs.size(0) : 1;
  const int64_t categories = probs.size(-1);
  const std::vector<float> weights = probs.detach().to_vector();
  std::vector<std::vector<double>> checked;
  for (int64_t r = 0; r < rows; ++r) checked.push_back(checked_row(weights, r, categories, num_samples, replacement));
  // Drawn after every check, so that a refused call draws nothing.
  const std::vector<double> u = random::unit_doubles(static_cast<size_t>(rows * num_samples));
  std::vector<int64_t> samples(static_cast<size_t>(rows * num_samples));
  for (int64_t r = 0; r < rows; ++r)
    sample_row(std::move(checked[static_cast<size_t>(r)]), u.data() + r * num_samples, num_samples, replacement,
               samples.data() + r * num_samples);
  const Shape shape = probs.dim() == 2 ? Shape{rows, num_samples} : Shape{num_samples};
  return Tensor::from_vector(samples, shape, probs.device());
}

}  // namespace tandem
