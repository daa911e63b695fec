#pragma once
// The list forms of broadcast and reduce that the plain functions (lists of one tensor) and the coalesced ones (all
// their tensors) share: one backend collective for a whole list.

#include <vector>

#include "tandem/core/device.h"
#include "tandem/core/tensor.h"

namespace tandem::comm::detail {

// result[d][i] is tensors[i] on devices[d]. The tensors are defined and all on one device; the devices exist. An
// entry on the tensors' own device holds the tensors themselves; every other entry holds new contiguous copies (a
// device listed twice gets copies that do not alias the first ones).
std::vector<std::vector<Tensor>> broadcast_lists(const std::vector<Tensor>& tensors,
                                                 const std::vector<Device>& devices);

// result[i] is inputs[0][i] + inputs[1][i] + ..., a new contiguous tensor on `destination`. At least two lists of
// equal length, each on one device (pairwise distinct), shapes matching position by position; `destination` exists.
std::vector<Tensor> reduce_lists(const std::vector<std::vector<Tensor>>& inputs, Device destination);

}  // namespace tandem::comm::detail
