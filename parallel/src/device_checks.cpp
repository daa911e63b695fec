#include "device_checks.h"

#include "tandem/core/error.h"

namespace tandem::parallel::detail {

void check_distinct_devices(const std::vector<Device>& devices, const char* caller) {
  for (size_t i = 0; i < devices.size(); ++i)
    for (size_t j = i + 1; j < devices.size(); ++j)
      TANDEM_CHECK(devices[i] != devices[j], caller, ": device ", devices[i], " is listed twice (entries ", i,
                   " and ", j, ")");
}

Device common_device(const std::vector<Tensor>& tensors, const char* caller, const char* noun) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    TANDEM_CHECK(tensors[i].defined(), caller, ": ", noun, " ", i, " is undefined");
    TANDEM_CHECK(tensors[i].device() == tensors[0].device(), caller, ": ", noun, " ", i, " is on ",
                 tensors[i].device(), " but ", noun, " 0 is on ", tensors[0].device());
  }
  return tensors.at(0).device();
}

}  // namespace tandem::parallel::detail
