#pragma once
// The differentiable communication primitives of the parallel layer, as autograd Functions over comm:
//   Broadcast          <->  ReduceAddCoalesced    (each is the other's backward)
//   Scatter            <->  Gather                (each is the other's backward)
// Apply them with autograd::apply; parallel::replicate, parallel::scatter and parallel::gather are the usual entry
// points. Outputs are not recorded when no input requires grad or grad mode is off. None of them saves tensors for
// backward (only devices and sizes), so each node can run in any number of backward passes (Note [Saved tensors]
// in core/src/autograd/function.cpp): each pass reduces, gathers or scatters the gradients it brings.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tandem/comm/comm.h"
#include "tandem/core/autograd.h"
#include "tandem/core/device.h"
#include "tandem/core/tensor.h"

namespace tandem::parallel {

// inputs: P tensors on one device. Outputs: D * P tensors, output [d * P + i] = input i on devices[d]
// (comm::broadcast_coalesced). An output on the inputs' own device shares storage with the input (no copy) but is
// a separate non-leaf carrying the gradient edge.
// Backward: the P sums over d of the gradients of outputs [d * P + i], on the inputs' device, computed by one
// comm::reduce_add_coalesced call (ReduceAddCoalesced's forward).
// Errors: empty `devices`, a device listed twice, inputs on different devices.
class Broadcast final : public autograd::Function {
 public:
  explicit Broadcast(std::vector<Device> devices, size_t buffer_size = comm::kDefaultBufferSize);
  std::vector<Tensor> forward(const std::vector<Tensor>& inputs) override;
  std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) override;
  std::string name() const override { return "Broadcast"; }

 private:
  std::vector<Device> devices_;
  size_t buffer_size_;
  Device source_;
};

// inputs: D * P tensors, input [d * P + i] on device d of a list of D distinct devices (the inverse layout of
// Broadcast's outputs). Outputs: P tensors, output i = sum over d of input [d * P + i], on `destination`
// (comm::reduce_add_coalesced, one reduction per bucket).
// Backward: output i's gradient broadcast back to every input device (Broadcast's forward).
// Errors: `group_size` 0 or not dividing the number of inputs; the layout rules of comm::reduce_add_coalesced.
class ReduceAddCoalesced final : public autograd::Function {
 public:
  ReduceAddCoalesced(Device destination, size_t group_size, size_t buffer_size = comm::kDefaultBufferSize);
  std::vector<Tensor> forward(const std::vector<Tensor>& inputs) override;
  std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) override;
  std::string name() const override { return "ReduceAddCoalesced"; }

 private:
  Device destination_;
  size_t group_size_;  // P: tensors per device
  size_t buffer_size_;
  std::vector<Device> input_devices_;
};

// One input; outputs: its chunks along `dim`, chunk i on devices[i] (comm::scatter; `chunk_sizes` empty means
// Tensor::chunk rules, which may give fewer chunks than devices).
// Backward: the chunk gradients gathered onto the input's device (chunks that got no gradient count as zeros).
class Scatter final : public autograd::Function {
 public:
  Scatter(std::vector<Device> devices, std::vector<int64_t> chunk_sizes = {}, int64_t dim = 0);
  std::vector<Tensor> forward(const std::vector<Tensor>& inputs) override;
  std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) override;
  std::string name() const override { return "Scatter"; }

 private:
  std::vector<Device> devices_;
  std::vector<int64_t> chunk_sizes_;
  int64_t dim_;
  Device input_device_;
};

// Inputs: tensors on any devices; one output: their concatenation along `dim` on `destination` (comm::gather).
// Backward: the output gradient split with the inputs' sizes along `dim`, piece i sent back to input i's device.
class Gather final : public autograd::Function {
 public:
  Gather(Device destination, int64_t dim = 0);
  std::vector<Tensor> forward(const std::vector<Tensor>& inputs) override;
  std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) override;
  std::string name() const override { return "Gather"; }

 private:
  Device destination_;
  int64_t dim_;
  int64_t wrapped_dim_ = 0;
  std::vector<Device> input_devices_;
  std::vector<int64_t> input_sizes_;
};

}  // namespace tandem::parallel
