#include "tandem/trainers/models.h"

#include "tandem/core/error.h"
#include "tandem/core/shape.h"
#include "tandem/nn/activation.h"
#include "tandem/nn/conv.h"
#include "tandem/nn/dropout.h"
#include "tandem/nn/flatten.h"
#include "tandem/nn/linear.h"
#include "tandem/nn/pooling.h"

namespace tandem::trainers {

Activation parse_activation(std::string_view text) {
  if (text == "none") return Activation::None;
  if (text == "relu") return Activation::ReLU;
  if (text == "tanh") return Activation::Tanh;
  TANDEM_FAIL("parse_activation: \"", text, "\" is not an activation; expected none, relu or tanh");
}

std::string to_string(Activation activation) {
  switch (activation) {
    case Activation::None:
      return "none";
    case Activation::ReLU:
      return "relu";
    case Activation::Tanh:
      return "tanh";
  }
  return "?";
}

std::shared_ptr<nn::Sequential> make_mlp(int64_t inputs, int64_t hidden, Activation activation) {
  TANDEM_CHECK(inputs >= 1 && hidden >= 1, "make_mlp: inputs ", inputs, " and hidden ", hidden,
               " but expected both at least 1");
  return make_mlp(inputs, std::vector<int64_t>{hidden}, 1, activation);
}

std::shared_ptr<nn::Sequential> make_mlp(int64_t inputs, const std::vector<int64_t>& hidden, int64_t outputs,
                                         Activation activation, double dropout) {
  TANDEM_CHECK(!hidden.empty(), "make_mlp: no hidden widths; expected at least one");
  TANDEM_CHECK(inputs >= 1 && outputs >= 1, "make_mlp: inputs ", inputs, " and outputs ", outputs,
               " but expected both at least 1");
  auto model = std::make_shared<nn::Sequential>();
  int64_t width = inputs;
  for (size_t i = 0; i < hidden.size(); ++i) {
    TANDEM_CHECK(hidden[i] >= 1, "make_mlp: hidden width ", i + 1, " is ", hidden[i], " but expected at least 1");
    model->push_back(std::make_shared<nn::Linear>(width, hidden[i]));
    if (activation == Activation::ReLU) model->push_back(std::make_shared<nn::ReLU>());
    if (activation == Activation::Tanh) model->push_back(std::make_shared<nn::Tanh>());
    if (dropout != 0.0) model->push_back(std::make_shared<nn::Dropout>(dropout));  // NaN too: Dropout refuses it
    width = hidden[i];
  }
  model->push_back(std::make_shared<nn::Linear>(width, outputs));
  return model;
}

std::shared_ptr<nn::Sequential> make_cnn(const CnnOptions& options) {
  const Shape& image = options.image_shape;
  TANDEM_CHECK(image.size() == 3, "make_cnn: image_shape is ", tandem::to_string(image), " but expected {C, H, W}");
  TANDEM_CHECK(image[0] >= 1 && image[1] >= 2 && image[2] >= 2, "make_cnn: image_shape ", tandem::to_string(image),
               " but expected at least 1 channel and 2 x 2 pixels (the pooling's window)");
  for (const auto& [name, size] : {std::pair<const char*, int64_t>{"classes", options.classes},
                                   {"channels1", options.channels1},
                                   {"channels2", options.channels2},
                                   {"hidden", options.hidden}}) {
    TANDEM_CHECK(size >= 1, "make_cnn: ", name, " is ", size, " but expected at least 1");
  }
  checked_numel(image, "make_cnn (image_shape)");
  const int64_t pooled = checked_numel({options.channels2, image[1] / 2, image[2] / 2}, "make_cnn (pooled features)");
  auto model = std::make_shared<nn::Sequential>();
  const auto dropout = [&] {
    if (options.dropout != 0.0) model->push_back(std::make_shared<nn::Dropout>(options.dropout));  // NaN refused
  };
  if (options.flat_input) model->push_back(std::make_shared<nn::Unflatten>(1, image));
  model->push_back(std::make_shared<nn::Conv2d>(image[0], options.channels1, 3, nn::Conv2dOptions{.padding = 1}));
  model->push_back(std::make_shared<nn::ReLU>());
  model->push_back(
      std::make_shared<nn::Conv2d>(options.channels1, options.channels2, 3, nn::Conv2dOptions{.padding = 1}));
  model->push_back(std::make_shared<nn::ReLU>());
  model->push_back(std::make_shared<nn::MaxPool2d>(2));
  model->push_back(std::make_shared<nn::Flatten>());
  dropout();
  model->push_back(std::make_shared<nn::Linear>(pooled, options.hidden));
  model->push_back(std::make_shared<nn::ReLU>());
  dropout();
  model->push_back(std::make_shared<nn::Linear>(options.hidden, options.classes));
  return model;
}

}  // namespace tandem::trainers
