#pragma once
// parallel::data_parallel and the DataParallel module (torch.nn.DataParallel / LibTorch data_parallel.h).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tandem/core/device.h"
#include "tandem/core/tensor.h"
#include "tandem/nn/module.h"

namespace tandem::parallel {

// Evaluates module(input) data-parallel: the input is scattered along `dim` over `devices` (default:
// default_devices()), which are then trimmed to the number of chunks; the module is replicated onto them; the
// replicas run with parallel_apply; the outputs are gathered along `dim` onto `output_device` (default:
// devices[0]). With one device (given, or left after trimming), a plain forward on that device, on the calling
// thread (so its random draws come from the calling thread's generator stream, not from the device's). Gradients
// reach the master parameters as with a single-device forward of the whole batch.
// Errors: null module; the module's parameters not on devices[0]; scatter's and gather's errors; a module that
// returns more than one output (use the general form below).
Tensor data_parallel(const std::shared_ptr<nn::Module>& module, const Tensor& input, std::vector<Device> devices = {},
                     std::optional<Device> output_device = std::nullopt, int64_t dim = 0);

// The general form, for modules with several inputs or outputs (torch's data_parallel with a tuple of inputs):
// every input is scattered along `dim` the same way, so replica i gets chunk i of each input, in order; output k is
// the gather along `dim` of every replica's output k. The one-tensor form is this with one input, the module
// returning one output. Same devices, output device, one-device path and gradients as the one-tensor form.
// Errors: as the one-tensor form; also no inputs, an undefined input ("input j is undefined"), inputs whose sizes
// along `dim` differ, replicas that return different numbers of outputs.
std::vector<Tensor> data_parallel(const std::shared_ptr<nn::Module>& module, const std::vector<Tensor>& inputs,
                                  std::vector<Device> devices = {}, std::optional<Device> output_device = std::nullopt,
                                  int64_t dim = 0);

// A module that runs the wrapped module with data_parallel. The wrapped module is its only child, named "module"
// (so parameters are named "module.fc1.weight", as in PyTorch), and its parameters() are the wrapped module's.
class DataParallel : public nn::Cloneable<DataParallel> {
 public:
  // devices: default default_devices(), fixed at construction. Errors: null module; a device that does not exist.
  DataParallel(std::shared_ptr<nn::Module> module, std::vector<Device> devices = {},
               std::optional<Device> output_device = std::nullopt, int64_t dim = 0);

  Tensor forward(const Tensor& input) override;                                 // data_parallel(module, input)
  std::vector<Tensor> forward_all(const std::vector<Tensor>& inputs) override;  // data_parallel(module, inputs)
  std::string extra_repr() const override;

  const std::shared_ptr<nn::Module>& module() const { return module_; }
  const std::vector<Device>& devices() const { return devices_; }
  Device output_device() const { return output_device_; }
  int64_t dim() const { return dim_; }

 private:
  std::shared_ptr<nn::Module> module_;
  std::vector<Device> devices_;
  Device output_device_;
  int64_t dim_;
};

}  // namespace tandem::parallel
