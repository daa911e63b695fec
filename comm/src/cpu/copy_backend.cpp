// The copy backend: host copies and adds for virtual CPU devices, and, through core's cross-device copies, any mix
// of devices (a CPU source with CUDA targets, CUDA inputs reduced onto a CPU device, ...).

#include "comm_backend.h"

namespace tandem::comm::detail {
namespace {

class CopyBackend final : public Backend {
 public:
  void broadcast(const Tensor& src, const std::vector<Tensor>& dsts) override {
    for (Tensor dst : dsts) dst.copy_(src);
  }

  // Sums in input order, ((inputs[0] + inputs[1]) + inputs[2]) + ..., on the output's device.
  void reduce(const std::vector<Tensor>& inputs, const Tensor& output) override {
    Tensor sum = output;
    sum.copy_(inputs[0]);
    for (size_t i = 1; i < inputs.size(); ++i) sum.add_(inputs[i].to(sum.device()));
  }

  void all_reduce(const std::vector<Tensor>& tensors) override {
    Tensor sum = Tensor::empty(tensors[0].shape(), tensors[0].device());
    reduce(tensors, sum);
    for (Tensor t : tensors) t.copy_(sum);
  }

  void copy(const std::vector<Tensor>& srcs, const std::vector<Tensor>& dsts) override {
    for (size_t i = 0; i < srcs.size(); ++i) Tensor(dsts[i]).copy_(srcs[i]);
  }
};

}  // namespace

Backend& copy_backend() {
  static CopyBackend backend;
  return backend;
}

}  // namespace tandem::comm::detail
