#include "tandem/parallel/sharded_state.h"

#include <algorithm>
#include <memory>

#include "tandem/core/error.h"
#include "tandem/core/grad_mode.h"

namespace tandem::parallel {

namespace {

// The parameters' places, by bucket (Note [Sharded state by parameter]).
struct Place {
  size_t parameter;
  int64_t offset;  // in the bucket
};

std::vector<std::vector<Place>> places_by_bucket(const GradientLayout& layout) {
  std::vector<std::vector<Place>> places(layout.buckets().size());
  for (size_t i = 0; i < layout.parameter_count(); ++i) {
    if (!layout.has_place(i)) continue;
    const size_t b = layout.bucket_of(i);
    places[b].push_back({i, layout.offset(i) - layout.buckets()[b].start});
  }
  return places;
}

}  // namespace

optim::StreamedOptimizerState stream_optimizer_state(const ShardedOptimizer& optimizer) {
  ReplicatedModule& replicated = optimizer.model().replicated();
  const std::vector<Tensor> master = replicated.module()->parameters();
  const std::vector<std::vector<Place>> places = places_by_bucket(replicated.gradient_layout());
  // The devices' shards, and the bucket slot gathered last, shared by the sources of its parameters: one bucket
  // slot of the whole state on the host at a time.
  struct Shards {
    std::vector<optim::OptimizerState> local;
    size_t bucket = 0, slot = 0;
    Tensor gathered;
  };
  auto shards = std::make_shared<Shards>();
  for (size_t d = 0; d < optimizer.size(); ++d) shards->local.push_back(optimizer.optimizer(d).state_dict());
  const optim::OptimizerState& first = shards->local[0];
  optim::StreamedOptimizerState state{first.kind, first.version, std::vector<int64_t>(master.size(), 0), {}};
  const auto gather = [group = optimizer.model().group(), shards](size_t b, size_t s) {
    if (shards->gathered.defined() && shards->bucket == b && shards->slot == s) return shards->gathered;
    NoGradGuard no_grad;
    shards->gathered = Tensor();  // dropped before the next one is gathered
    std::vector<Tensor> mine;
    for (const optim::OptimizerState& device : shards->local) mine.push_back(device.parameters[b].tensors[s].second);
    shards->gathered = group->all_gather(mine)[0].to(Device::cpu());
    shards->bucket = b;
    shards->slot = s;
    return shards->gathered;
  };
  for (size_t b = 0; b < places.size(); ++b) {
    const optim::ParameterState& shard = first.parameters[b];
    for (const Place& place : places[b]) state.steps[place.parameter] = shard.step;
    for (size_t s = 0; s < shard.tensors.size(); ++s) {
      for (const Place& place : places[b]) {
        const Shape& shape = master[place.parameter].shape();
        const std::string& slot = shard.tensors[s].first;
        state.slots.push_back(
            {place.parameter, slot,
             TensorSource{optim::optimizer_tensor_name(place.parameter, slot), shard.tensors[s].second.dtype(), shape,
                          [gather, b, s, offset = place.offset, shape] {
                            return gather(b, s).narrow(0, offset, numel_of(shape)).reshape(shape);
                          }}});
      }
    }
  }
  return state;
}

optim::OptimizerState gather_optimizer_state(const ShardedOptimizer& optimizer) {
  const optim::StreamedOptimizerState stream = stream_optimizer_state(optimizer);
  optim::OptimizerState state{stream.kind, stream.version, std::vector<optim::ParameterState>(stream.steps.size())};
  for (size_t i = 0; i < stream.steps.size(); ++i) state.parameters[i].step = stream.steps[i];
  for (const optim::StreamedSlot& slot : stream.slots) {
    state.parameters[slot.parameter].tensors.emplace_back(slot.slot, slot.tensor.values().clone());
  }
  return state;
}

void scatter_optimizer_state(ShardedOptimizer& optimizer, const optim::OptimizerState& state) {
  NoGradGuard no_grad;
  ReplicatedModule& replicated = optimizer.model().replicated();
  const GradientLayout& layout = replicated.gradient_layout();
  const std::vector<Tensor> master = replicated.module()->parameters();
  const std::vector<std::vector<Place>> places = places_by_bucket(layout);
  const comm::ProcessGroup& group = *optimizer.model().group();
  const auto world = static_cast<int64_t>(group.world_devices());
  TANDEM_CHECK(state.parameters.size() == master.size(), "parallel::scatter_optimizer_state: a state of ",
               state.parameters.size(), " parameters for a model of ", master.size());
  for (size_t i = 0; i < master.size(); ++i) {
    for (const auto& slot : state.parameters[i].tensors) {
      TANDEM_CHECK(slot.second.shape() == master[i].shape(), "parallel::scatter_optimizer_state: parameter ", i, "'s ",
                   slot.first, " is of another shape than the parameter");
    }
  }
  std::vector<optim::OptimizerState> local;
  for (size_t d = 0; d < optimizer.size(); ++d) {
    optim::OptimizerState mine{state.kind, state.version, {}};
    const auto owner = static_cast<int64_t>(static_cast<size_t>(group.rank()) * optimizer.size() + d);
    for (size_t b = 0; b < places.size(); ++b) {
      const int64_t chunk = layout.buckets()[b].length / world;
      const int64_t lo_chunk = owner * chunk;
      optim::ParameterState shard;
      if (!places[b].empty()) {
        const optim::ParameterState& first = state.parameters[places[b][0].parameter];
        shard.step = first.step;
        for (const auto& slot : first.tensors) {
          shard.tensors.emplace_back(slot.first, Tensor::zeros({chunk}, slot.second.dtype(), Device::cpu()));
        }
      }
      for (const Place& place : places[b]) {
        const optim::ParameterState& parameter = state.parameters[place.parameter];
        bool same = parameter.step == shard.step && parameter.tensors.size() == shard.tensors.size();
        for (size_t s = 0; same && s < shard.tensors.size(); ++s) {
          same = parameter.tensors[s].first == shard.tensors[s].first;
        }
        TANDEM_CHECK(same, "parallel::scatter_optimizer_state: parameter ", place.parameter,
                     " has another step count or other slots than the other parameters of its bucket ", b);
        const int64_t numel = master[place.parameter].numel();
        const int64_t lo = std::max(place.offset, lo_chunk);
        const int64_t hi = std::min(place.offset + numel, lo_chunk + chunk);
        if (lo >= hi) continue;
        for (size_t s = 0; s < shard.tensors.size(); ++s) {
          shard.tensors[s]
              .second.narrow(0, lo - lo_chunk, hi - lo)
              .copy_(parameter.tensors[s].second.reshape({numel}).narrow(0, lo - place.offset, hi - lo));
        }
      }
      mine.parameters.push_back(std::move(shard));
    }
    local.push_back(std::move(mine));
  }
  for (size_t d = 0; d < optimizer.size(); ++d) optimizer.optimizer(d).load_state_dict(local[d]);
}

}  // namespace tandem::parallel
