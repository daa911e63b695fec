#include "tandem/trainers/process_devices.h"

#include "tandem/core/error.h"

namespace tandem::trainers {

std::vector<Device> process_devices(std::string_view text, const comm::LaunchInfo& launch, int gpu_count) {
  if (text != "all") return parse_devices(text);
  if (gpu_count == 0) return {Device::cpu(0), Device::cpu(1)};  // default_devices() of a machine without GPUs
  TANDEM_CHECK(gpu_count >= launch.local_size, "process_devices: 'all' for ", launch.local_size,
               " processes on this machine but it has ", gpu_count,
               " GPUs; expected at least one GPU per process (or name each process's devices)");
  const int share = gpu_count / launch.local_size;
  std::vector<Device> devices;
  for (int i = 0; i < share; ++i) devices.push_back(Device::cuda(launch.local_rank * share + i));
  return devices;
}

}  // namespace tandem::trainers
