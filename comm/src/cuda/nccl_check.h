#pragma once
// TANDEM_NCCL_CHECK: turns a failed NCCL call into a tandem::Error naming the call and NCCL's reason.

#include <nccl.h>

namespace tandem::comm::nccl {

[[noreturn]] void throw_nccl_error(ncclResult_t status, const char* call, const char* file, int line);

}  // namespace tandem::comm::nccl

#define TANDEM_NCCL_CHECK(expr)                                                            \
  do {                                                                                     \
    ncclResult_t tandem_nccl_status_ = (expr);                                             \
    if (tandem_nccl_status_ != ncclSuccess) [[unlikely]]                                   \
      ::tandem::comm::nccl::throw_nccl_error(tandem_nccl_status_, #expr, __FILE__, __LINE__); \
  } while (false)
