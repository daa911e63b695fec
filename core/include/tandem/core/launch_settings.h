#pragma once
// Process-wide choices for how kernels are launched. Each takes effect for the launches issued after it changes, on
// every thread; read and written atomically.

namespace tandem {

// Whether the CUDA backend launches its own kernels so that each may start while the kernel before it in its stream
// is still running, up to the point where it waits for that kernel's results (programmatic dependent launch, on
// GPUs of compute capability 9.0 and later; Note [Dependent launches] in core/src/cuda/launch.cuh). Results are the
// same either way; only the gaps between small kernels shrink. On by default; TANDEM_DEPENDENT_LAUNCH=0 in the
// environment turns it off from the start. No effect without CUDA. The switch exists to compare the two.
bool dependent_launches();
void set_dependent_launches(bool enabled);

}  // namespace tandem
