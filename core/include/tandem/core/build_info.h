#pragma once
// How this copy of tandem was built: its version, build type and compiler, and the CUDA, NCCL and MPI it uses.
// The facts are fixed when tandem is configured (core/CMakeLists.txt); `tandem-train --version` prints them.

#include <string>

namespace tandem {

struct BuildInfo {
  std::string version;             // the project's version, "0.1.0"
  std::string build_type;          // CMAKE_BUILD_TYPE, "Release"
  std::string compiler;            // "GNU 12.2.0"
  std::string sanitizers;          // TANDEM_SANITIZE, "address,undefined"; empty when none
  bool cuda = false;               // the CUDA backend (cuBLAS, NCCL) is built
  std::string cuda_version;        // of the CUDA toolkit built against, "13.0.48"; empty without CUDA
  std::string cuda_architectures;  // CMAKE_CUDA_ARCHITECTURES, "90"; empty without CUDA
  std::string nccl_version;        // "2.28.3"; empty without CUDA
  bool mpi = false;                // the MPI channel of process groups is built
  std::string mpi_version;         // the MPI standard of the library built against, "3.1"; empty without MPI
};

const BuildInfo& build_info();

// build_info() as a few lines of text, one per fact, the first one "tandem <version>".
std::string build_summary();

}  // namespace tandem
