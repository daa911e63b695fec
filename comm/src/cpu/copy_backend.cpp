// The copy backend: host copies and adds for virtual CPU devices, and, through core's cross-device copies, any mix
// of devices (a CPU source with CUDA targets, CUDA inputs reduced onto a CPU device, ...).

#include "comm_backend.h"

namespace tandem::comm::detail {
namespace {

// sum = terms[0] + terms[1] + ..., accumulated in that order on sum's device.
void sum_into(Tensor sum, const std::vector<Tensor>& terms) {
  sum.copy_(terms[0]);
  for (size_t d = 1; d < terms.size(); ++d) sum.add_(terms[d].to(sum.device()));
}

class CopyBackend final : public Backend {
 public:
  void broadcast(const std::vector<Tensor>& srcs, const std::vector<std::vector<Tensor>>& dsts) override {
    for (const std::vector<Tensor>& list : dsts) copy(srcs, list);
  }

  void reduce(const std::vector<std::vector<Tensor>>& inputs, const std::vector<Tensor>& outputs) override {
    std::vector<Tensor> column(inputs.size());
    for (size_t i = 0; i < outputs.size(); ++i) {
      for (size_t d = 0; d < inputs.size(); ++d) column[d] = inputs[d][i];
      sum_into(outputs[i], column);
    }
  }

  void all_reduce(const std::vector<Tensor>& tensors) override {
    const Tensor sum = Tensor::empty(tensors[0].shape(), tensors[0].device());
    sum_into(sum, tensors);
    for (Tensor t : tensors) t.copy_(sum);
  }

  // Synchronous: each tensor's producers have finished (CPU), or core's copies order the work (a mixed list).
  void start_all_reduce(const std::vector<Tensor>& tensors, const std::vector<StreamMarker>&) override {
    all_reduce(tensors);
  }

  void join(const std::vector<Tensor>&) override {}

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
