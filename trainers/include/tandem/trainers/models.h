#pragma once
// Small ready-made models: multi-layer perceptrons for regression and classification.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/nn/sequential.h"

namespace tandem::trainers {

enum class Activation { None, ReLU, Tanh };
// "none", "relu", "tanh"; throws Error on anything else.
Activation parse_activation(std::string_view text);
std::string to_string(Activation activation);

// Linear(inputs, hidden) -> [activation] -> Linear(hidden, 1), with child names "0", "1" (and "2" after an
// activation). Activation::None gives a linear model written as two layers. Initialized from the global generator.
std::shared_ptr<nn::Sequential> make_mlp(int64_t inputs, int64_t hidden, Activation activation = Activation::None);

// Linear(inputs, hidden[0]) -> [activation] -> [Dropout] -> Linear(hidden[0], hidden[1]) -> [activation] ->
// [Dropout] -> ... -> Linear(hidden.back(), outputs): one Linear per hidden width plus the output layer, the
// activation after each hidden Linear, then an nn::Dropout(dropout) unless dropout is 0 (then there are no Dropout
// layers, and the model and its initial values are those of a call without dropout), children named "0", "1", ...
// in order. make_mlp(inputs, hidden, activation) is make_mlp(inputs, {hidden}, 1, activation). Errors: no hidden
// widths; inputs, outputs or a width below 1; dropout outside [0, 1) (nn::Dropout's message).
std::shared_ptr<nn::Sequential> make_mlp(int64_t inputs, const std::vector<int64_t>& hidden, int64_t outputs,
                                         Activation activation, double dropout = 0.0);

}  // namespace tandem::trainers
