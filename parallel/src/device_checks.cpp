#include "device_checks.h"

#include "tandem/core/error.h"

namespace tandem::parallel::detail {

Device common_device(const std::vector<Tensor>& tensors, const char* caller, const char* noun) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    TANDEM_CHECK(tensors[i].defined(), caller, ": ", noun, " ", i, " is undefined");
    TANDEM_CHECK(tensors[i].device() == tensors[0].device(), caller, ": ", noun, " ", i, " is on ",
                 tensors[i].device(), " but ", noun, " 0 is on ", tensors[0].device());
  }
  return tensors.at(0).device();
}

void check_parameters_on(const std::vector<std::pair<std::string, Tensor>>& named, const Device& device,
                         std::string_view caller, std::string_view why) {
  for (const auto& [name, parameter] : named) {
    TANDEM_CHECK(parameter.device() == device, caller, ": parameter '", name, "' is on ", parameter.device(),
                 " but expected ", device, " (", why, ")");
  }
}

}  // namespace tandem::parallel::detail
