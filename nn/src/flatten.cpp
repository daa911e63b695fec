#include "tandem/nn/flatten.h"

#include <algorithm>

#include "tandem/core/error.h"
#include "tandem/core/shape.h"

namespace tandem::nn {
namespace {

// `dim` wrapped into [0, rank), or Error naming the layer, the argument and the input's shape.
int64_t flatten_layer_dim(const char* layer, const char* argument, int64_t dim, int64_t rank, const Tensor& input) {
  TANDEM_CHECK(dim >= -rank && dim < rank, layer, ": ", argument, " ", dim, " is out of range for an input of shape ",
               to_string(input.shape()));
  return dim < 0 ? dim + rank : dim;
}

}  // namespace

Tensor Flatten::forward(const Tensor& input) {
  TANDEM_CHECK(input.defined(), "nn::Flatten: the input is undefined");
  const int64_t rank = std::max<int64_t>(input.dim(), 1);  // a 0-D input has the one dim 0 (or -1), as in PyTorch
  const int64_t start = flatten_layer_dim("nn::Flatten", "start_dim", start_dim_, rank, input);
  const int64_t end = flatten_layer_dim("nn::Flatten", "end_dim", end_dim_, rank, input);
  TANDEM_CHECK(start <= end, "nn::Flatten: start_dim ", start_dim_, " comes after end_dim ", end_dim_,
               " for an input of shape ", to_string(input.shape()));
  return input.flatten(start, end);
}

std::string Flatten::extra_repr() const {
  return "start_dim=" + std::to_string(start_dim_) + ", end_dim=" + std::to_string(end_dim_);
}

Unflatten::Unflatten(int64_t dim, Shape sizes) : dim_(dim), sizes_(std::move(sizes)) {
  TANDEM_CHECK(!sizes_.empty(), "nn::Unflatten: sizes are empty but expected at least one size");
  TANDEM_CHECK(std::count(sizes_.begin(), sizes_.end(), -1) <= 1, "nn::Unflatten: sizes ", to_string(sizes_),
               " have more than one -1");
  TANDEM_CHECK(std::all_of(sizes_.begin(), sizes_.end(), [](int64_t size) { return size >= -1; }),
               "nn::Unflatten: sizes ", to_string(sizes_), " have a size below -1");
}

Tensor Unflatten::forward(const Tensor& input) {
  TANDEM_CHECK(input.defined(), "nn::Unflatten: the input is undefined");
  TANDEM_CHECK(input.dim() >= 1, "nn::Unflatten: the input is 0-D but expected at least one dim");
  const int64_t at = flatten_layer_dim("nn::Unflatten", "dim", dim_, input.dim(), input);
  const int64_t size = input.size(at);
  Shape split = sizes_;
  Shape given = sizes_;
  std::replace(given.begin(), given.end(), int64_t{-1}, int64_t{1});
  const int64_t known = checked_numel(given, "nn::Unflatten");
  const auto inferred = std::find(split.begin(), split.end(), -1);
  if (inferred != split.end()) {
    TANDEM_CHECK(known != 0 && size % known == 0, "nn::Unflatten: sizes ", to_string(sizes_), " cannot split dim ",
                 dim_, " of size ", size, " (input shape ", to_string(input.shape()), ")");
    *inferred = size / known;
  } else {
    TANDEM_CHECK(known == size, "nn::Unflatten: sizes ", to_string(sizes_), " hold ", known, " elements but dim ", dim_,
                 " has size ", size, " (input shape ", to_string(input.shape()), ")");
  }
  Shape target(input.shape().begin(), input.shape().begin() + at);
  target.insert(target.end(), split.begin(), split.end());
  target.insert(target.end(), input.shape().begin() + at + 1, input.shape().end());
  return input.reshape(target);  // one dim split: its elements stay one evenly strided line, so this is a view
}

std::string Unflatten::extra_repr() const {
  std::string text = "dim=" + std::to_string(dim_) + ", unflattened_size=(";
  for (size_t i = 0; i < sizes_.size(); ++i) text += (i == 0 ? "" : ", ") + std::to_string(sizes_[i]);
  return text + (sizes_.size() == 1 ? ",)" : ")");
}

}  // namespace tandem::nn
