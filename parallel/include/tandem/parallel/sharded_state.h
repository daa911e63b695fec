#pragma once
// The state of a ShardedOptimizer in the world-size-independent form of a plain optimizer's state_dict(): one
// optim::ParameterState per parameter of the model (Module::parameters() order), each slot (momentum_buffer,
// exp_avg, exp_avg_sq) in its parameter's shape, so a sharded run's state loads into a plain optimizer at any world
// size and the reverse.
//
// Note [Sharded state by parameter]: device g's optimizer holds one 1-D shard per bucket (Note [Sharded optimizer
// state] in sharded_optimizer.h); its slots are the bucket's slots over chunk g. Gathering all-gathers one bucket's
// slot at a time and cuts each parameter of the bucket out of it; scattering cuts each device's chunk out of the
// parameters' slots under the current layout (any world size). A shard's step count is the step count of every
// parameter of its bucket, so the parameters of one bucket must share one step count and one set of slots.

#include "tandem/optim/optimizer_state.h"
#include "tandem/parallel/sharded_optimizer.h"

namespace tandem::parallel {

// Collective (every process calls it). Tensors on the CPU. A parameter without a place in the layout has no state.
optim::OptimizerState gather_optimizer_state(const ShardedOptimizer& optimizer);
// The same state a tensor at a time, for writing it without holding all of it (Trainer::save_checkpoint): the slots
// of one bucket after another, each of its parameters in turn. Asking the first source of a bucket's slot gathers
// that slot (a collective: every process asks every source, in order) and drops the slot gathered before, so the host
// holds one bucket slot of the whole state at a time. The sources read the shards as they are now: ask them before
// the next step.
optim::StreamedOptimizerState stream_optimizer_state(const ShardedOptimizer& optimizer);
// Every local device takes its chunks of `state`. Everything is checked before any state changes. Errors: a parameter
// count other than the model's, a slot of another shape than its parameter's, parameters of one bucket with
// different step counts or slots, and load_state_dict's own.
void scatter_optimizer_state(ShardedOptimizer& optimizer, const optim::OptimizerState& state);

}  // namespace tandem::parallel
