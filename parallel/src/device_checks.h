#pragma once
// Argument checks shared by the parallel functions. Messages start with the caller's name. (That a device list
// names each device once is core's check_distinct, tandem/core/device.h.)

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tandem/core/device.h"
#include "tandem/core/tensor.h"

namespace tandem::parallel::detail {

// The device every tensor of the non-empty `tensors` lives on: "<caller>: <noun> 2 is on cpu:1 but <noun> 0 is
// on cpu:0" otherwise (an undefined tensor is an error too).
Device common_device(const std::vector<Tensor>& tensors, const char* caller, const char* noun);

// The one check that a module's parameters (`named`, from named_parameters()) are all on `device`, which `why`
// explains: "<caller>: parameter 'fc1.weight' is on cpu:1 but expected cpu:0 (devices[0])" for the first one that
// is not.
void check_parameters_on(const std::vector<std::pair<std::string, Tensor>>& named, const Device& device,
                         std::string_view caller, std::string_view why);

}  // namespace tandem::parallel::detail
