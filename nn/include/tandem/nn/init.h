#pragma once
// nn::init: in-place initialization of parameters with PyTorch's conventions (torch.nn.init). Each function writes
// the tensor's values under no grad (keeping its identity, device and requires_grad) and returns it. Random values
// come from the calling thread's generator stream (Note [Generator streams] in core/random.h), so a seed gives the
// same values on every device.
//
// Fans, for a tensor of shape [out, in, k...] (at least 2-D; a Linear weight is [out, in]):
//   fan_in = in * prod(k), fan_out = out * prod(k).
// Gains (calculate_gain): "linear", "identity", "sigmoid" and the convolutions 1; "tanh" 5/3; "relu" sqrt(2);
// "leaky_relu" sqrt(2 / (1 + slope^2)) (slope `param`, default 0.01); "selu" 3/4.
//
// Errors (every function): an undefined or int64 tensor; for the fan-based ones, a tensor with fewer than 2
// dimensions or a zero fan; an unknown mode or nonlinearity; bounds or deviations that are NaN or out of order.

#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>

#include "tandem/core/tensor.h"

namespace tandem::nn::init {

// {fan_in, fan_out} as above.
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& tensor);
double calculate_gain(std::string_view nonlinearity, std::optional<double> param = std::nullopt);

Tensor& uniform_(Tensor& tensor, double low = 0.0, double high = 1.0);  // U[low, high)
Tensor& normal_(Tensor& tensor, double mean = 0.0, double std = 1.0);   // N(mean, std^2)
Tensor& constant_(Tensor& tensor, double value);
Tensor& zeros_(Tensor& tensor);
Tensor& ones_(Tensor& tensor);

// U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out)); N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor& xavier_uniform_(Tensor& tensor, double gain = 1.0);
Tensor& xavier_normal_(Tensor& tensor, double gain = 1.0);
// std = calculate_gain(nonlinearity, a) / sqrt(fan), fan = fan_in for mode "fan_in" or fan_out for "fan_out";
// kaiming_uniform_ draws U(-sqrt(3) std, sqrt(3) std), kaiming_normal_ N(0, std^2).
Tensor& kaiming_uniform_(Tensor& tensor, double a = 0.0, std::string_view mode = "fan_in",
                         std::string_view nonlinearity = "leaky_relu");
Tensor& kaiming_normal_(Tensor& tensor, double a = 0.0, std::string_view mode = "fan_in",
                        std::string_view nonlinearity = "leaky_relu");

}  // namespace tandem::nn::init
