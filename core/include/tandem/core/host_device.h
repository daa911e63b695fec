#pragma once
// TANDEM_HOST_DEVICE marks a function compiled for the host and, under nvcc, for CUDA devices too: the one
// definition of the qualifier that value types (bfloat16.h) and the backends' shared op tables use.

#if defined(__CUDACC__)
#define TANDEM_HOST_DEVICE __host__ __device__
#else
#define TANDEM_HOST_DEVICE
#endif
