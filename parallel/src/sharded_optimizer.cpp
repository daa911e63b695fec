#include "tandem/parallel/sharded_optimizer.h"

#include <algorithm>

#include "tandem/core/dtype.h"
#include "tandem/core/error.h"
#include "tandem/core/fused.h"
#include "tandem/core/grad_mode.h"
#include "tandem/core/ops.h"

namespace tandem::parallel {

size_t optimizer_state_bytes(const optim::Optimizer& optimizer) {
  size_t bytes = 0;
  for (const optim::ParameterState& parameter : optimizer.state_dict().parameters) {
    for (const auto& slot : parameter.tensors) {
      bytes += static_cast<size_t>(slot.second.numel()) * element_size(slot.second.dtype());
    }
  }
  return bytes;
}

// Note [Sharded optimizer state] in sharded_optimizer.h: the shards, their gradients (the owned chunks of the
// buffers) and the pieces of the parameters that lie in them.
ShardedOptimizer::ShardedOptimizer(DistributedDataParallel& model, const Factory& make, const char* name)
    : name_(name), model_(model) {
  TANDEM_CHECK(model.options().zero_stage > 0, name_, ": the DistributedDataParallel has DistributedOptions::",
               "zero_stage 0, which all-reduces the gradients; construct it with zero_stage 1 or 2, or step with a ",
               "plain or replicated optimizer");
  TANDEM_CHECK(make != nullptr, name_, ": the factory is empty");
  ReplicatedModule& replicated = model.replicated();
  const GradientLayout& layout = replicated.gradient_layout();
  const GradientReducer& reducer = replicated.gradient_reducer();
  const std::vector<GradientLayout::Bucket>& buckets = layout.buckets();

  placed_.resize(buckets.size());
  const std::vector<Tensor> master = replicated.module()->parameters();
  for (size_t i = 0; i < layout.parameter_count(); ++i) {
    if (!layout.has_place(i)) continue;
    const GradientLayout::Bucket& bucket = buckets[layout.bucket_of(i)];
    placed_[layout.bucket_of(i)].push_back({i, layout.offset(i) - bucket.start, master[i].numel()});
  }

  NoGradGuard no_grad;
  for (size_t d = 0; d < replicated.size(); ++d) {
    const std::vector<Tensor> parameters = replicated.replicas()[d]->parameters();
    const Device device = replicated.gradient_buffer(d).device();
    std::vector<Tensor> flat(parameters.size());
    for (size_t i = 0; i < parameters.size(); ++i) {
      if (layout.has_place(i)) flat[i] = parameters[i].view({parameters[i].numel()});
    }
    std::vector<Tensor> shards;
    std::vector<Piece> pieces;
    for (size_t b = 0; b < buckets.size(); ++b) {
      Tensor gradients = reducer.owned_gradients(d, b);
      const int64_t chunk = gradients.numel();
      const int64_t first = reducer.owned_offset(d, b);  // the owned chunk, in the bucket
      Tensor shard = Tensor::zeros({chunk}, device);
      shard.set_requires_grad(true);
      shard.set_grad(gradients);
      for (const Placed& place : placed_[b]) {
        const int64_t lo = std::max(place.offset, first);
        const int64_t hi = std::min(place.offset + place.numel, first + chunk);
        if (lo < hi) {
          pieces.push_back(
              {shard.narrow(0, lo - first, hi - lo), flat[place.parameter].narrow(0, lo - place.offset, hi - lo)});
        }
      }
      shards.push_back(std::move(shard));
    }
    std::unique_ptr<optim::Optimizer> optimizer = make(shards);
    TANDEM_CHECK(optimizer != nullptr, name_, ": the factory returned null for device ", d);
    const std::vector<Tensor>& optimized = optimizer->parameters();
    bool same = optimized.size() == shards.size();
    for (size_t b = 0; same && b < shards.size(); ++b) same = optimized[b].is_same(shards[b]);
    TANDEM_CHECK(same, name_, ": the factory returned an optimizer over ", optimized.size(), " tensors for device ", d,
                 " that are not the ", shards.size(), " shards it was given");
    shards_.push_back(std::move(shards));
    pieces_.push_back(std::move(pieces));
    flat_parameters_.push_back(std::move(flat));
    optimizers_.push_back(std::move(optimizer));
  }
}

void ShardedOptimizer::step() { update(StepForm::Eager); }

void ShardedOptimizer::replayable_step() { update(StepForm::Replayable); }

void ShardedOptimizer::update(StepForm form) {
  model_.replicated().check_gradients_reduced(std::string(name_) +
                                              (form == StepForm::Eager ? "::step" : "::replayable_step"));
  {
    NoGradGuard no_grad;
    for (size_t d = 0; d < optimizers_.size(); ++d) {
      for (Piece& piece : pieces_[d]) piece.shard.copy_(piece.parameter);  // the parameters may have been loaded
      if (form == StepForm::Eager) {
        optimizers_[d]->step();
      } else {
        optimizers_[d]->replayable_step();
      }
    }
  }
  gather();
}

// One all_gather per bucket, in bucket order on every process; the gathered bucket (in global device order, so in
// buffer order) is written back into every parameter of the bucket on every local device.
void ShardedOptimizer::gather() {
  NoGradGuard no_grad;
  for (size_t b = 0; b < placed_.size(); ++b) {
    std::vector<Tensor> mine;
    for (const std::vector<Tensor>& shards : shards_) mine.push_back(shards[b]);
    const std::vector<Tensor> buckets = model_.group()->all_gather(mine);
    for (size_t d = 0; d < buckets.size(); ++d) {
      for (const Placed& place : placed_[b]) {
        flat_parameters_[d][place.parameter].copy_(buckets[d].narrow(0, place.offset, place.numel));
      }
    }
  }
}

// Note [Clipping over shards]: each device's owned chunks hold its part of the reduced gradients and the padding is
// zero, so the sum over the world's devices of each device's sum of squares of its chunks is the squared norm of all
// the gradients. One all_reduce of one element per device; the norm is computed and applied on every device, with
// no host round trip.
Tensor ShardedOptimizer::clip_grad_norm(double max_norm) {
  const std::string what = std::string(name_) + "::clip_grad_norm";
  TANDEM_CHECK(max_norm >= 0.0, what, ": max_norm must be >= 0, got ", max_norm);
  model_.replicated().check_gradients_reduced(what);
  NoGradGuard no_grad;
  std::vector<Tensor> squares;
  for (const std::vector<Tensor>& shards : shards_) {
    std::vector<Tensor> chunks;
    for (const Tensor& shard : shards) chunks.push_back(shard.grad());
    const Tensor norm = total_norm(chunks, 2.0).reshape({1});
    squares.push_back(norm * norm);
  }
  model_.group()->all_reduce(squares);
  Tensor first;
  for (size_t d = 0; d < shards_.size(); ++d) {
    const Tensor norm = sqrt(squares[d]);
    for (const Tensor& shard : shards_[d]) clip_by_norm_(shard.grad(), norm, static_cast<float>(max_norm));
    if (d == 0) first = norm.reshape({});
  }
  return first;
}

void ShardedOptimizer::zero_grad() { model_.zero_grad(); }

void ShardedOptimizer::set_lr(double lr) {
  for (const std::unique_ptr<optim::Optimizer>& optimizer : optimizers_) optimizer->set_lr(lr);
}

const Tensor& ShardedOptimizer::shard(size_t replica, size_t bucket) const {
  TANDEM_CHECK(replica < shards_.size() && bucket < placed_.size(), name_, "::shard: device ", replica, ", bucket ",
               bucket, " but there are ", shards_.size(), " devices and ", placed_.size(), " buckets");
  return shards_[replica][bucket];
}

optim::Optimizer& ShardedOptimizer::at(size_t replica) const {
  TANDEM_CHECK(replica < optimizers_.size(), name_, "::optimizer: device ", replica, " but there are ",
               optimizers_.size());
  return *optimizers_[replica];
}

ShardedSGD::ShardedSGD(DistributedDataParallel& model, optim::SGDOptions options)
    : ShardedOptimizer(
          model,
          [options](std::vector<Tensor> shards) { return std::make_unique<optim::SGD>(std::move(shards), options); },
          "parallel::ShardedSGD") {}

}  // namespace tandem::parallel
