// Built instead of src/mpi when tandem is configured with TANDEM_MPI=OFF (or without MPI found).

#include "process/host_channel.h"
#include "tandem/core/error.h"

namespace tandem::comm::detail {

std::unique_ptr<HostChannel> make_mpi_channel(const LaunchInfo& info) {
  TANDEM_FAIL("ProcessGroup::from_environment: the process was started by an MPI launcher (rank ", info.rank,
              " of ", info.size, ") but tandem was built without MPI (configure with -DTANDEM_MPI=ON, OpenMPI's "
              "development package installed)");
}

}  // namespace tandem::comm::detail
