#include "tandem/core/build_info.h"

// TANDEM_BUILD_* are defined for this file alone by core/CMakeLists.txt, so that a reconfigure that changes them
// rebuilds this file and nothing else.

namespace tandem {

const BuildInfo& build_info() {
  static const BuildInfo info{
      .version = TANDEM_BUILD_VERSION,
      .build_type = TANDEM_BUILD_TYPE,
      .compiler = TANDEM_BUILD_COMPILER,
      .sanitizers = TANDEM_BUILD_SANITIZERS,
      .cuda = TANDEM_BUILD_CUDA != 0,
      .cuda_version = TANDEM_BUILD_CUDA_VERSION,
      .cuda_architectures = TANDEM_BUILD_CUDA_ARCHITECTURES,
      .nccl_version = TANDEM_BUILD_NCCL_VERSION,
      .mpi = TANDEM_BUILD_MPI != 0,
      .mpi_version = TANDEM_BUILD_MPI_VERSION,
  };
  return info;
}

std::string build_summary() {
  const BuildInfo& info = build_info();
  std::string text = "tandem " + info.version + "\n";
  text += "build: " + (info.build_type.empty() ? std::string("(no build type)") : info.build_type) + ", " +
          info.compiler + ", C++20";
  if (!info.sanitizers.empty()) text += ", sanitizers " + info.sanitizers;
  text += "\nCUDA: ";
  text += info.cuda
              ? info.cuda_version + " for architectures " + info.cuda_architectures + ", NCCL " + info.nccl_version
              : std::string("not built (CPU devices only)");
  text += "\nMPI: ";
  text += info.mpi ? "MPI " + info.mpi_version + " (mpirun, srun)"
                   : std::string(
                         "not built (torchrun-style "
                         "variables and the file rendezvous only)");
  return text + "\n";
}

}  // namespace tandem
