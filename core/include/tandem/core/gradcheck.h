#pragma once
// A numeric check of analytic gradients, for ops and for users' own layers.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tandem/core/tensor.h"

namespace tandem::autograd {

struct GradcheckOptions {
  double eps = 1e-2;   // finite-difference step (in input units)
  double atol = 1e-3;  // an element passes when |analytic - numeric| <= atol + rtol * |numeric|
  double rtol = 1e-2;
  uint64_t seed = 0;   // of the random output cotangent (tandem's generator is not touched)
};

struct GradcheckInputReport {
  size_t input = 0;             // position in `inputs`
  double max_abs_error = 0.0;   // max over elements of |analytic - numeric|
  double max_rel_error = 0.0;   // max over elements of |analytic - numeric| / max(|numeric|, 1e-12)
  int64_t worst_element = -1;   // row-major index of the element furthest out of tolerance (or with the largest
                                // abs error when all pass); -1 for an input of no elements
};

struct GradcheckReport {
  std::vector<GradcheckInputReport> inputs;  // one per input that requires grad, in order
};

// Compares the gradients that autograd computes for f with central finite differences, for every input that
// requires grad.
//
// How: f(inputs) is reduced to a scalar L = sum(w * f(inputs)) with a random cotangent w (uniform in [0.5, 1.5),
// from `seed`). The analytic gradient is one backward of L on copies of the inputs (the caller's tensors and their
// .grad are left alone). The numeric one, for each element x of each input, is (L(x + eps) - L(x - eps)) / (2 eps'),
// where f runs in float32 on the inputs' devices (under NoGradGuard) and L and the difference are formed in float64 on
// the host; eps' is the step actually taken after rounding x +- eps to float32.
//
// Precision (tandem has no float64 tensors, so f itself runs in float32): the numeric derivative carries a rounding
// error of about 6e-8 * sum|w * f| / eps and a truncation error of about eps^2 * |f'''| / 6. The defaults (eps 1e-2,
// atol 1e-3, rtol 1e-2) suit functions whose outputs and derivatives are of order 1 over a few hundred elements;
// scale eps with the inputs, and loosen atol for large outputs. Kinks (relu at 0, abs at 0, clamp at its bounds, ties
// of max) closer than eps to an input give wrong numeric values: keep inputs away from them.
//
// f must compute its result from the tensors it is given (a layer's parameters are checked by passing them in), be
// deterministic, and return a defined tensor that requires grad when any input does. Inputs may live on any devices.
// Errors (tandem::Error): no inputs; an undefined input; eps <= 0, atol < 0 or rtol < 0; no input requires grad;
// f's output does not require grad; an element out of tolerance ("gradcheck: input 1 element [2, 0]: analytic ...
// numeric ...", the worst element of the first input that fails).
GradcheckReport gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                          const std::vector<Tensor>& inputs, const GradcheckOptions& options = {});

}  // namespace tandem::autograd
