#pragma once
// Argument checks and small helpers shared by the comm functions. Every error message starts with the caller's
// name ("comm::scatter: ...").

#include <string>
#include <vector>

#include "tandem/core/device.h"
#include "tandem/core/tensor.h"

namespace tandem::comm::detail {

// "<caller>: <what> is undefined"
void check_defined(const Tensor& tensor, const char* caller, const std::string& what);
// A non-empty list of devices that all exist.
void check_devices(const std::vector<Device>& devices, const char* caller);
// The operands of a reduction: one defined float32 tensor per device (tandem::check_distinct), all of the shape of
// the first; `noun` names an entry in messages ("input 1").
void check_one_per_device(const std::vector<Tensor>& tensors, const char* caller, const char* noun);
// Reductions sum float32 tensors only (copies, broadcast, scatter and gather take every dtype):
// "<caller>: <what> is int64 but expected float32 (comm sums float32 tensors; convert with .to(DType::Float32))".
void check_summable(const Tensor& tensor, const char* caller, const std::string& what);
// The devices of `tensors`, in order.
std::vector<Device> devices_of(const std::vector<Tensor>& tensors);
// A new contiguous tensor on `device` holding the values of `tensor` (which may have any strides), of its dtype.
Tensor copy_to(const Tensor& tensor, Device device);

}  // namespace tandem::comm::detail
