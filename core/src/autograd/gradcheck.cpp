// Finite-difference gradient checks (see gradcheck.h for the method and its precision).
#include "tandem/core/gradcheck.h"

#include <algorithm>
#include <cmath>

#include "tandem/core/error.h"
#include "tandem/core/grad_mode.h"
#include "tandem/core/splitmix64.h"

namespace tandem::autograd {
namespace {

using TensorFunction = std::function<Tensor(const std::vector<Tensor>&)>;

std::vector<double> to_double(const Tensor& t) {
  const std::vector<float> values = t.to_vector();
  return {values.begin(), values.end()};
}

// sum(w * f(inputs)) in float64, f evaluated without history.
double projected(const TensorFunction& f, const std::vector<Tensor>& inputs, const std::vector<double>& weights) {
  NoGradGuard no_grad;
  const Tensor out = f(inputs);
  TANDEM_CHECK(out.defined() && out.numel() == static_cast<int64_t>(weights.size()),
               "gradcheck: f returned ", out.defined() ? to_string(out.shape()) : "an undefined tensor",
               " on perturbed inputs but ", weights.size(), " elements at first");
  const std::vector<double> values = to_double(out);
  double total = 0.0;
  for (size_t i = 0; i < values.size(); ++i) total += values[i] * weights[i];
  return total;
}

std::string coordinates(int64_t flat, const Shape& shape) {
  Shape index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = flat % std::max<int64_t>(shape[d], 1);
    flat /= std::max<int64_t>(shape[d], 1);
  }
  return to_string(index);
}

}  // namespace

GradcheckReport gradcheck(const TensorFunction& f, const std::vector<Tensor>& inputs, const GradcheckOptions& options) {
  TANDEM_CHECK(!inputs.empty(), "gradcheck: expected at least one input");
  TANDEM_CHECK(options.eps > 0 && std::isfinite(options.eps), "gradcheck: eps is ", options.eps,
               " but expected a positive number");
  TANDEM_CHECK(options.atol >= 0 && options.rtol >= 0, "gradcheck: atol ", options.atol, " and rtol ", options.rtol,
               " must be >= 0");
  bool any = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    TANDEM_CHECK(inputs[i].defined(), "gradcheck: input ", i, " is an undefined tensor");
    any = any || inputs[i].requires_grad();
  }
  TANDEM_CHECK(any, "gradcheck: no input requires grad");

  // Analytic gradients, on leaf copies of the inputs that require grad.
  std::vector<Tensor> leaves = inputs;
  for (Tensor& leaf : leaves)
    if (leaf.requires_grad()) leaf = leaf.detach().clone().set_requires_grad();
  const Tensor output = f(leaves);
  TANDEM_CHECK(output.defined(), "gradcheck: f returned an undefined tensor");
  TANDEM_CHECK(output.requires_grad(), "gradcheck: f's output (shape ", to_string(output.shape()),
               ") does not require grad; it must be computed from the inputs that do");
  std::vector<double> weights(static_cast<size_t>(output.numel()));
  for (size_t i = 0; i < weights.size(); ++i)
    weights[i] = 0.5 + static_cast<double>(splitmix64(options.seed, i) >> 11) * 0x1.0p-53;
  const std::vector<float> weights_f(weights.begin(), weights.end());
  output.backward(Tensor::from_vector(weights_f, output.shape(), output.device()));

  GradcheckReport report;
  for (size_t which = 0; which < inputs.size(); ++which) {
    const Tensor& input = inputs[which];
    if (!input.requires_grad()) continue;
    const Tensor grad = leaves[which].grad();
    const std::vector<double> analytic =
        grad.defined() ? to_double(grad) : std::vector<double>(static_cast<size_t>(input.numel()), 0.0);
    const std::vector<float> base = input.to_vector();
    GradcheckInputReport entry;
    entry.input = which;
    double worst_excess = -INFINITY, worst_numeric = 0.0;
    for (size_t e = 0; e < base.size(); ++e) {
      std::vector<Tensor> perturbed = inputs;
      auto evaluate = [&](double delta, float& moved_value) {
        std::vector<float> moved = base;
        moved[e] = moved_value = static_cast<float>(base[e] + delta);
        perturbed[which] = Tensor::from_vector(moved, input.shape(), input.device());
        return projected(f, perturbed, weights);
      };
      float plus = 0, minus = 0;
      const double high = evaluate(options.eps, plus);
      const double low = evaluate(-options.eps, minus);
      const double numeric = (high - low) / (static_cast<double>(plus) - static_cast<double>(minus));
      const double error = std::abs(analytic[e] - numeric);
      const double excess = std::isnan(error) ? INFINITY : error - (options.atol + options.rtol * std::abs(numeric));
      entry.max_abs_error = std::isnan(error) ? error : std::max(entry.max_abs_error, error);
      entry.max_rel_error = std::max(entry.max_rel_error, error / std::max(std::abs(numeric), 1e-12));
      if (excess > worst_excess) {
        worst_excess = excess;
        worst_numeric = numeric;
        entry.worst_element = static_cast<int64_t>(e);
      }
    }
    TANDEM_CHECK(worst_excess <= 0, "gradcheck: input ", which, " element ",
                 coordinates(entry.worst_element, input.shape()), ": analytic gradient ",
                 analytic[static_cast<size_t>(std::max<int64_t>(entry.worst_element, 0))], " but numeric ",
                 worst_numeric, " (abs error ",
                 std::abs(analytic[static_cast<size_t>(std::max<int64_t>(entry.worst_element, 0))] - worst_numeric),
                 " > atol ", options.atol, " + rtol ", options.rtol, " * |numeric|)");
    report.inputs.push_back(entry);
  }
  return report;
}

}  // namespace tandem::autograd
