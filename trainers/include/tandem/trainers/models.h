#pragma once
// Small ready-made models: multi-layer perceptrons for regression and classification, and a small CNN for images.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/core/shape.h"
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

// make_cnn's sizes. The defaults are the digits benchmark's CNN (docs/tandem-train.md).
struct CnnOptions {
  Shape image_shape;  // {C, H, W} of one image
  int64_t classes = 0;
  int64_t channels1 = 32;  // the first convolution's output channels
  int64_t channels2 = 64;  // the second's
  int64_t hidden = 128;    // the hidden Linear's width
  double dropout = 0.0;    // an nn::Dropout before each Linear unless 0
  // Rows [N, C * H * W] (a TableDataset's, pixels in row-major C, H, W order), viewed as images by a first
  // nn::Unflatten(1, image_shape); false: images [N, C, H, W], the input of a PyTorch CNN, and no Unflatten.
  bool flat_input = true;
};

// [Unflatten(1, {C, H, W})] -> Conv2d(C, channels1, 3, padding 1) -> ReLU -> Conv2d(channels1, channels2, 3,
// padding 1) -> ReLU -> MaxPool2d(2) -> Flatten -> [Dropout] -> Linear(channels2 * (H / 2) * (W / 2), hidden) -> ReLU
// -> [Dropout] -> Linear(hidden, classes): one score per class, children named "0", "1", ... in order (the first
// convolution is "1" with flat_input, "0" without). Initialized from the global generator as PyTorch's layers.
// Errors: an image_shape that is not 3 sizes; a size, classes, channels or hidden below 1; an image smaller than
// 2 x 2 (the pooling's window); dropout outside [0, 1) (nn::Dropout's message); sizes whose product overflows.
std::shared_ptr<nn::Sequential> make_cnn(const CnnOptions& options);

}  // namespace tandem::trainers
