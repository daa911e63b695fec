#include "tandem/nn/init.h"

#include <cmath>
#include <string>

#include "tandem/core/error.h"
#include "tandem/core/grad_mode.h"
#include "tandem/core/ops.h"
#include "tandem/core/shape.h"

namespace tandem::nn::init {
namespace {

void check_initializable(const Tensor& tensor, const char* caller) {
  TANDEM_CHECK(tensor.defined(), caller, ": the tensor is undefined");
  TANDEM_CHECK(tensor.dtype() != DType::Int64, caller, ": the tensor is ", tensor.dtype(),
               " but expected a floating point dtype");
}

// Writes `values` (float32, tensor's shape, on its device) into tensor in place.
Tensor& assign(Tensor& tensor, const Tensor& values) {
  NoGradGuard no_grad;
  tensor.copy_(values);
  return tensor;
}

Tensor& fill_uniform(Tensor& tensor, double low, double high, const char* caller) {
  check_initializable(tensor, caller);
  TANDEM_CHECK(low <= high, caller, ": the bounds are [", low, ", ", high, ") but expected low <= high");
  return assign(tensor, Tensor::uniform(tensor.shape(), static_cast<float>(low), static_cast<float>(high),
                                        tensor.device()));
}

Tensor& fill_normal(Tensor& tensor, double mean, double std, const char* caller) {
  check_initializable(tensor, caller);
  TANDEM_CHECK(std >= 0.0, caller, ": std is ", std, " but expected a non-negative number");
  return assign(tensor, Tensor::randn(tensor.shape(), tensor.device()) * static_cast<float>(std) +
                            static_cast<float>(mean));
}

std::pair<int64_t, int64_t> fans(const Tensor& tensor, const char* caller) {
  TANDEM_CHECK(tensor.defined(), caller, ": the tensor is undefined");
  TANDEM_CHECK(tensor.dim() >= 2, caller, ": the tensor has shape ", to_string(tensor.shape()),
               " but fans need at least 2 dimensions ([out, in, ...])");
  int64_t receptive = 1;
  for (int64_t d = 2; d < tensor.dim(); ++d) receptive *= tensor.size(d);
  const int64_t fan_in = tensor.size(1) * receptive;
  const int64_t fan_out = tensor.size(0) * receptive;
  TANDEM_CHECK(fan_in > 0 && fan_out > 0, caller, ": the tensor has shape ", to_string(tensor.shape()),
               ", whose fans (", fan_in, ", ", fan_out, ") are not positive");
  return {fan_in, fan_out};
}

double xavier_std(const Tensor& tensor, double gain, const char* caller) {
  const auto [fan_in, fan_out] = fans(tensor, caller);
  return gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out));
}

double kaiming_std(const Tensor& tensor, double a, std::string_view mode, std::string_view nonlinearity,
                   const char* caller) {
  TANDEM_CHECK(mode == "fan_in" || mode == "fan_out", caller, ": mode is '", excerpt(mode),
               "' but expected 'fan_in' or 'fan_out'");
  const auto [fan_in, fan_out] = fans(tensor, caller);
  const double gain = calculate_gain(nonlinearity, a);
  return gain / std::sqrt(static_cast<double>(mode == "fan_in" ? fan_in : fan_out));
}

}  // namespace

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& tensor) {
  return fans(tensor, "nn::init::calculate_fan_in_and_fan_out");
}

double calculate_gain(std::string_view nonlinearity, std::optional<double> param) {
  constexpr const char* fn = "nn::init::calculate_gain";
  for (std::string_view unit : {"linear", "identity", "sigmoid", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
                                "conv_transpose2d", "conv_transpose3d"})
    if (nonlinearity == unit) return 1.0;
  if (nonlinearity == "tanh") return 5.0 / 3.0;
  if (nonlinearity == "relu") return std::sqrt(2.0);
  if (nonlinearity == "selu") return 0.75;
  TANDEM_CHECK(nonlinearity == "leaky_relu", fn, ": unknown nonlinearity '", excerpt(nonlinearity),
               "' (expected linear, identity, sigmoid, conv*, tanh, relu, leaky_relu or selu)");
  const double slope = param.value_or(0.01);
  TANDEM_CHECK(std::isfinite(slope), fn, ": the leaky_relu slope is ", slope, " but expected a finite number");
  return std::sqrt(2.0 / (1.0 + slope * slope));
}

Tensor& uniform_(Tensor& tensor, double low, double high) {
  return fill_uniform(tensor, low, high, "nn::init::uniform_");
}

Tensor& normal_(Tensor& tensor, double mean, double std) { return fill_normal(tensor, mean, std, "nn::init::normal_"); }

Tensor& constant_(Tensor& tensor, double value) {
  check_initializable(tensor, "nn::init::constant_");
  NoGradGuard no_grad;
  tensor.fill_(value);
  return tensor;
}

Tensor& zeros_(Tensor& tensor) { return constant_(tensor, 0.0); }

Tensor& ones_(Tensor& tensor) { return constant_(tensor, 1.0); }

Tensor& xavier_uniform_(Tensor& tensor, double gain) {
  constexpr const char* fn = "nn::init::xavier_uniform_";
  const double bound = std::sqrt(3.0) * xavier_std(tensor, gain, fn);
  return fill_uniform(tensor, -bound, bound, fn);
}

Tensor& xavier_normal_(Tensor& tensor, double gain) {
  constexpr const char* fn = "nn::init::xavier_normal_";
  return fill_normal(tensor, 0.0, xavier_std(tensor, gain, fn), fn);
}

Tensor& kaiming_uniform_(Tensor& tensor, double a, std::string_view mode, std::string_view nonlinearity) {
  constexpr const char* fn = "nn::init::kaiming_uniform_";
  const double bound = std::sqrt(3.0) * kaiming_std(tensor, a, mode, nonlinearity, fn);
  return fill_uniform(tensor, -bound, bound, fn);
}

Tensor& kaiming_normal_(Tensor& tensor, double a, std::string_view mode, std::string_view nonlinearity) {
  constexpr const char* fn = "nn::init::kaiming_normal_";
  return fill_normal(tensor, 0.0, kaiming_std(tensor, a, mode, nonlinearity, fn), fn);
}

}  // namespace tandem::nn::init
