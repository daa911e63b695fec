#pragma once
// Argument checks shared by the parallel functions. Messages start with the caller's name.

#include <string>
#include <vector>

#include "tandem/core/device.h"
#include "tandem/core/tensor.h"

namespace tandem::parallel::detail {

// "<caller>: device cpu:1 is listed twice (entries 0 and 2)"
void check_distinct_devices(const std::vector<Device>& devices, const char* caller);
// The device every tensor of the non-empty `tensors` lives on: "<caller>: <noun> 2 is on cpu:1 but <noun> 0 is
// on cpu:0" otherwise (an undefined tensor is an error too).
Device common_device(const std::vector<Tensor>& tensors, const char* caller, const char* noun);

}  // namespace tandem::parallel::detail
