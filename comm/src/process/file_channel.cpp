// Placeholder until the file rendezvous channel lands: the torchrun-style launch is refused with an Error.

#include "host_channel.h"
#include "tandem/core/error.h"

namespace tandem::comm::detail {

std::unique_ptr<HostChannel> make_file_channel(const LaunchInfo& info, std::chrono::milliseconds timeout) {
  TANDEM_FAIL("ProcessGroup::from_environment: the file rendezvous (TANDEM_INIT_METHOD=file://",
              excerpt(info.rendezvous_path), ") is not built yet");
}

}  // namespace tandem::comm::detail
