#pragma once
// The check that every process of a group built the same model, before DistributedDataParallel relies on it (the
// processes' gradient buffers and buckets must match element for element).

#include "tandem/comm/process_group.h"
#include "tandem/nn/module.h"

namespace tandem::parallel::detail {

// Collective: compares `module`'s parameters (count, names, shapes, requires_grad) with those of every other process
// of `group`, through two all_gathers. On a difference every process throws an Error that starts with `caller` and
// names the first one (the lowest parameter index, then the lowest rank differing from rank 0), e.g.
// "<caller>: the processes' models differ: parameter 3 ('fc2.weight' here) has shape [2, 6] on rank 0 but [3, 6] on
// rank 1; every process must build the same model".
void check_same_structure(const nn::Module& module, comm::ProcessGroup& group, const char* caller);

}  // namespace tandem::parallel::detail
