#pragma once
// parallel::replicate: one copy of a module per device, whose parameters carry gradient edges back to the master.

#include <concepts>
#include <memory>
#include <vector>

#include "tandem/comm/comm.h"
#include "tandem/core/device.h"
#include "tandem/nn/module.h"

namespace tandem::parallel {

// Returns one structural copy of `module` per entry of `devices`, in order. Replica d's parameters are the outputs
// of one Broadcast of the master's parameters (all on one device, which may be any device, listed or not): equal
// to the master's, non-leaves whose gradients are summed onto the master parameters through
// comm::reduce_add_coalesced when backward runs over the replicas' outputs. One backward over every replica's loss
// (autograd::backward(losses)) reduces once; one backward per replica's loss works too, each reducing the
// gradients it brings and adding them to the master's .grad, since the Broadcast saves no tensors (Note [Replica
// gradient edges]); each replica's own graph still runs once unless retain_graph. On the master's own device the
// replica's parameters share storage with the master's. With grad mode off the replicas are plain copies.
// Buffers (nn::Module::buffers) are not differentiated: a replica on the device of a master buffer uses that very
// tensor, so what it writes there (BatchNorm's running statistics) is the master's; the other replicas get copies
// (Note [Replica buffers] in replicate.cpp).
// The module must be clonable (derive from nn::Cloneable<Self>). Empty `devices` returns an empty list.
// Errors: null module; a device listed twice; a device that does not exist; parameters on different devices; a
// module that is not clonable.
std::vector<std::shared_ptr<nn::Module>> replicate(const std::shared_ptr<nn::Module>& module,
                                                   const std::vector<Device>& devices,
                                                   size_t buffer_size = comm::kDefaultBufferSize);

// Typed convenience: replicas of a std::shared_ptr<M> come back as std::shared_ptr<M>.
template <class M>
  requires std::derived_from<M, nn::Module> && (!std::same_as<M, nn::Module>)
std::vector<std::shared_ptr<M>> replicate(const std::shared_ptr<M>& module, const std::vector<Device>& devices,
                                          size_t buffer_size = comm::kDefaultBufferSize) {
  std::vector<std::shared_ptr<M>> typed;
  for (std::shared_ptr<nn::Module>& replica : replicate(std::shared_ptr<nn::Module>(module), devices, buffer_size))
    typed.push_back(std::static_pointer_cast<M>(std::move(replica)));
  return typed;
}

}  // namespace tandem::parallel
