#pragma once
// The devices one process of a job drives, from a device list as users write it (tandem-train's --devices).

#include <string_view>
#include <vector>

#include "tandem/comm/process_group.h"
#include "tandem/core/device.h"

namespace tandem::trainers {

// "all": this process's share of the machine's `gpu_count` GPUs, split between the launch.local_size processes of
// the machine: local rank r takes GPUs [r * k, (r + 1) * k) with k = gpu_count / local_size (GPUs left over by the
// division stay idle, so that every process drives the same number); without GPUs, the virtual CPU devices of
// default_devices() (cpu:0, cpu:1), the same list in every process. Without a launcher (local_size 1) "all" is
// default_devices(). Any other text is this process's list as given (parse_devices), the same in every process
// unless the launcher starts them with different arguments.
// Errors: those of parse_devices; "all" with fewer GPUs than processes on the machine.
std::vector<Device> process_devices(std::string_view text, const comm::LaunchInfo& launch,
                                    int gpu_count = cuda_device_count());

}  // namespace tandem::trainers
