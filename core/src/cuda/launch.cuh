#pragma once
// How the CUDA backend sizes and launches its own kernels: one block size, grid-stride loops over capped grids, and
// launch<body>(...), the only way a kernel of core/src/cuda/*.cu is started.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "cuda/dependent_launch.h"
#include "tandem/core/cuda/context.h"

namespace tandem::cuda::kernels {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;  // grid-stride loops cover larger inputs

inline int blocks_for(int64_t work) {
  return static_cast<int>(std::clamp<int64_t>((work + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

// Whether p may be read and written as float4s (16-byte vector accesses: the elementwise engine, the optimizer
// updates).
__host__ __device__ inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

__device__ inline int64_t global_thread() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ inline int64_t grid_threads() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// Note [Dependent launches]: most of the backend's kernels are small (a few blocks over a few thousand elements), and
// between two of them in a stream the GPU otherwise idles while the second one's grid is set up and its blocks are
// dispatched. From compute capability 9.0 a kernel launched with programmatic stream serialization may start while
// the kernel before it in the stream still runs, once every block of that one has executed
// griddepcontrol.launch_dependents (or exited); its threads then execute griddepcontrol.wait, which returns when every
// grid it depends on has completed and its memory writes are visible. launch() wraps every body in dependent_kernel,
// whose threads wait first, before touching memory, and then let the next kernel launch: so no body ever reads or
// writes anything before its predecessors are done, exactly as with ordinary stream order, and the ordering stays
// transitive (a kernel that completed had waited for its own predecessors). Only the launch latency overlaps. A kernel
// of another library (cuBLAS, NCCL) that follows one of these is launched without the attribute and waits for it as
// usual; one that precedes them triggers implicitly when it ends. Captured into a CUDA graph, the launches become
// programmatic edges with the same meaning. set_dependent_launches(false) (or TANDEM_DEPENDENT_LAUNCH=0) turns the
// attribute off; the wait is then a no-op.
__device__ __forceinline__ void wait_for_previous_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

template <auto Body, typename... Params>
__global__ void dependent_kernel(Params... params) {
  wait_for_previous_grids();
  Body(params...);
}

template <auto Body>
struct DependentKernel;

template <typename... Params, void (*Body)(Params...)>
struct DependentKernel<Body> {
  static auto get() { return &dependent_kernel<Body, Params...>; }
};

// Launches Body(args...) as a dependent_kernel on `stream` (Note [Dependent launches]) with `shared_bytes` of dynamic
// shared memory (extern __shared__ in Body; the kernel's limit is raised past the default 48 KiB where it asks for
// more); throws tandem::Error when the launch fails.
template <auto Body, typename... Args>
void launch_with_shared(dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream, Args&&... args) {
  const auto kernel = DependentKernel<Body>::get();
  if (shared_bytes > 48 * 1024) {  // per device: set at every such launch (a host call, no stream work)
    TANDEM_CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared_bytes)));
  }
  cudaLaunchAttribute overlap{};
  overlap.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  overlap.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = &overlap;
  config.numAttrs = may_overlap_previous_kernel(reinterpret_cast<const void*>(kernel)) ? 1 : 0;
  TANDEM_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

// launch_with_shared without dynamic shared memory: how the backend's other kernels start.
template <auto Body, typename... Args>
void launch(dim3 grid, dim3 block, cudaStream_t stream, Args&&... args) {
  launch_with_shared<Body>(grid, block, 0, stream, std::forward<Args>(args)...);
}

}  // namespace tandem::cuda::kernels
