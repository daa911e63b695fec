#include <cmath>
#include <sstream>

#include "tandem/core/grad_mode.h"
#include "tandem/core/ops.h"
#include "tandem/nn/normalization.h"

namespace tandem::nn {

template <class Self>
BatchNormBase<Self>::BatchNormBase(const char* layer, int64_t num_features, double eps, std::optional<double> momentum,
                                   bool affine, bool track_running_stats, Device device)
    : num_features_(num_features), eps_(eps), momentum_(momentum) {
  TANDEM_CHECK(num_features >= 1, layer, ": num_features is ", num_features, " but expected at least 1");
  TANDEM_CHECK(eps >= 0.0, layer, ": eps is ", eps, " but expected a non-negative number");
  TANDEM_CHECK(!momentum || (*momentum >= 0.0 && *momentum <= 1.0), layer, ": momentum is ", momentum.value_or(0.0),
               " but expected a value in [0, 1] (or nullopt for a cumulative average)");
  if (affine) {
    weight = Tensor::ones({num_features}, device);
    bias = Tensor::zeros({num_features}, device);
    this->register_parameter("weight", weight);
    this->register_parameter("bias", bias);
  }
  if (track_running_stats) {
    running_mean = Tensor::zeros({num_features}, device);
    running_var = Tensor::ones({num_features}, device);
    num_batches_tracked = Tensor::zeros({}, DType::Int64, device);
    this->register_buffer("running_mean", running_mean);
    this->register_buffer("running_var", running_var);
    this->register_buffer("num_batches_tracked", num_batches_tracked);
  }
}

template <class Self>
Tensor BatchNormBase<Self>::normalize(const char* layer, const Tensor& input) {
  // Per-channel tensors of shape [C] broadcast against [N, C, d2, ...] as [C, 1, ...] (one 1 per dimension after C);
  // the statistics are taken over every dimension but C.
  Shape channel_shape{num_features_};
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < input.dim(); ++d) {
    channel_shape.push_back(1);
    dims.push_back(d);
  }
  int64_t count = input.numel() / num_features_;

  Tensor normalized;
  if (this->is_training() && sync_) {
    // Note [Synchronized batch statistics]: [sum x, n] and then sum (x - mean)^2, each summed over every replica.
    const Tensor local = cat({sum(input, dims), Tensor::full({1}, static_cast<float>(count), input.device())});
    const Tensor global = sync_->all_reduce_sum(layer, local);
    const Tensor global_count =
        index_select(global, 0, Tensor::full({1}, static_cast<double>(num_features_), DType::Int64, input.device()));
    count = static_cast<int64_t>(global_count.item<double>());
    TANDEM_CHECK(count > 1, layer, ": the replicas' inputs have one value per channel in all (this one has shape ",
                 to_string(input.shape()), "), but training needs more than one to estimate a variance");
    const Tensor channels = Tensor::arange(num_features_, DType::Int64, input.device());
    const Tensor batch_mean = index_select(global, 0, channels) * static_cast<float>(1.0 / count);
    const Tensor centered = input - batch_mean.reshape(channel_shape);
    const Tensor batch_var =
        sync_->all_reduce_sum(layer, sum(centered * centered, dims)) * static_cast<float>(1.0 / count);
    normalized = centered * rsqrt(batch_var.reshape(channel_shape) + static_cast<float>(eps_));
    if (running_mean.defined()) update_running_stats(batch_mean, batch_var, count);
  } else if (this->is_training() || !running_mean.defined()) {
    TANDEM_CHECK(count > 1, layer, ": input has shape ", to_string(input.shape()),
                 ", one value per channel, but training needs more than one to estimate a variance");
    const Tensor batch_mean = mean(input, dims);
    const Tensor batch_var = var(input, dims, /*correction=*/0.0);
    normalized = (input - batch_mean.reshape(channel_shape)) *
                 rsqrt(batch_var.reshape(channel_shape) + static_cast<float>(eps_));
    if (this->is_training() && running_mean.defined()) update_running_stats(batch_mean, batch_var, count);
  } else {
    normalized = (input - running_mean.reshape(channel_shape)) *
                 rsqrt(running_var.reshape(channel_shape) + static_cast<float>(eps_));
  }
  if (!weight.defined()) return normalized;
  return normalized * weight.reshape(channel_shape) + bias.reshape(channel_shape);
}

template <class Self>
void BatchNormBase<Self>::update_running_stats(const Tensor& batch_mean, const Tensor& batch_var, int64_t count) {
  NoGradGuard no_grad;
  const Tensor batches = num_batches_tracked.to(DType::Float32) + 1.0f;
  num_batches_tracked.copy_(batches);
  const Tensor unbiased_var = batch_var.detach() * static_cast<float>(static_cast<double>(count) / (count - 1));
  // f is a float (momentum) or a one-element tensor (1 / num_batches_tracked, kept on the device).
  const auto blend = [&](const auto& f) {
    running_mean.copy_(running_mean * (1.0f - f) + batch_mean.detach() * f);
    running_var.copy_(running_var * (1.0f - f) + unbiased_var * f);
  };
  if (momentum_) {
    blend(static_cast<float>(*momentum_));
  } else {
    blend(1.0f / batches);
  }
}

template <class Self>
std::string BatchNormBase<Self>::extra_repr() const {
  std::ostringstream os;
  os << num_features_ << ", eps=" << eps_ << ", momentum=";
  if (momentum_)
    os << *momentum_;
  else
    os << "None";
  os << ", affine=" << (weight.defined() ? "true" : "false")
     << ", track_running_stats=" << (running_mean.defined() ? "true" : "false");
  return os.str();
}

template class BatchNormBase<BatchNorm1d>;
template class BatchNormBase<BatchNorm2d>;

BatchNorm1d::BatchNorm1d(int64_t num_features, double eps, std::optional<double> momentum, bool affine,
                         bool track_running_stats, Device device)
    : BatchNormBase("nn::BatchNorm1d", num_features, eps, momentum, affine, track_running_stats, device) {}

Tensor BatchNorm1d::forward(const Tensor& input) {
  TANDEM_CHECK(input.defined(), "nn::BatchNorm1d: the input is undefined");
  TANDEM_CHECK((input.dim() == 2 || input.dim() == 3) && input.size(1) == num_features(),
               "nn::BatchNorm1d: input has shape ", to_string(input.shape()), " but expected [N, ", num_features(),
               "] or [N, ", num_features(), ", L] (num_features = ", num_features(), ")");
  return normalize("nn::BatchNorm1d", input);
}

BatchNorm2d::BatchNorm2d(int64_t num_features, double eps, std::optional<double> momentum, bool affine,
                         bool track_running_stats, Device device)
    : BatchNormBase("nn::BatchNorm2d", num_features, eps, momentum, affine, track_running_stats, device) {}

Tensor BatchNorm2d::forward(const Tensor& input) {
  TANDEM_CHECK(input.defined(), "nn::BatchNorm2d: the input is undefined");
  TANDEM_CHECK(input.dim() == 4 && input.size(1) == num_features(), "nn::BatchNorm2d: input has shape ",
               to_string(input.shape()), " but expected [N, C, H, W] with C = num_features = ", num_features());
  return normalize("nn::BatchNorm2d", input);
}

}  // namespace tandem::nn
