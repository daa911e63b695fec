#pragma once
// Small ready-made models for regression.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "tandem/nn/sequential.h"

namespace tandem::trainers {

enum class Activation { None, ReLU, Tanh };
// "none", "relu", "tanh"; throws Error on anything else.
Activation parse_activation(std::string_view text);
std::string to_string(Activation activation);

// Linear(inputs, hidden) -> [activation] -> Linear(hidden, 1), with child names "0", "1" (and "2" after an
// activation). Activation::None gives a linear model written as two layers. Initialized from the global generator.
std::shared_ptr<nn::Sequential> make_mlp(int64_t inputs, int64_t hidden, Activation activation = Activation::None);

}  // namespace tandem::trainers
