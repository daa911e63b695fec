#pragma once
// The host side of the backend's dependent launches (Note [Dependent launches] in launch.cuh).

namespace tandem::cuda::kernels {

// Whether a launch of `kernel` on the current device may overlap its predecessor: dependent_launches() is on, the
// device has compute capability 9.0 or later and the code it runs was compiled for 9.0 or later (built for an older
// architecture only, the kernels lack the wait). Decided once per device, by the first kernel launched there: all of
// the backend's kernels are built for the same architectures.
bool may_overlap_previous_kernel(const void* kernel);

}  // namespace tandem::cuda::kernels
