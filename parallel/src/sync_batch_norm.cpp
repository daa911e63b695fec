#include "tandem/parallel/sync_batch_norm.h"

#include <string>
#include <utility>
#include <vector>

#include "tandem/core/autograd.h"
#include "tandem/core/error.h"
#include "tandem/nn/normalization.h"

namespace tandem::parallel {
namespace {

// The sum over the group of a [k] tensor on the group's one device; backward is the same sum of the gradient
// (every process's result depends on every process's input).
class GroupSum final : public autograd::Function {
 public:
  GroupSum(std::shared_ptr<comm::ProcessGroup> group, const char* layer) : group_(std::move(group)), layer_(layer) {}

  std::vector<Tensor> forward(const std::vector<Tensor>& inputs) override { return {reduce(inputs[0])}; }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override { return {reduce(grads[0])}; }
  std::string name() const override { return "GroupSum"; }

 private:
  Tensor reduce(const Tensor& local) const {
    const Device device = group_->devices().front();
    TANDEM_CHECK(local.device() == device, layer_, " (synchronized over a process group): input on ", local.device(),
                 " but the group's device is ", device, "; replicas on several devices per process are not supported");
    std::vector<Tensor> tensors{local.contiguous().clone()};
    group_->all_reduce(tensors, comm::ReduceOp::Sum);
    return tensors[0];
  }

  std::shared_ptr<comm::ProcessGroup> group_;
  const char* layer_;
};

class GroupStatisticsSync final : public nn::BatchStatisticsSync {
 public:
  explicit GroupStatisticsSync(std::shared_ptr<comm::ProcessGroup> group) : group_(std::move(group)) {}

  Tensor all_reduce_sum(const char* layer, const Tensor& local) override {
    return autograd::apply(std::make_shared<GroupSum>(group_, layer), {local})[0];
  }

 private:
  std::shared_ptr<comm::ProcessGroup> group_;
};

void set_sync_recursively(nn::Module& module, const std::shared_ptr<nn::BatchStatisticsSync>& sync) {
  if (auto* bn1d = dynamic_cast<nn::BatchNorm1d*>(&module)) bn1d->set_statistics_sync(sync);
  if (auto* bn2d = dynamic_cast<nn::BatchNorm2d*>(&module)) bn2d->set_statistics_sync(sync);
  for (const std::shared_ptr<nn::Module>& child : module.children()) set_sync_recursively(*child, sync);
}

}  // namespace

std::shared_ptr<nn::Module> convert_sync_batchnorm(std::shared_ptr<nn::Module> module,
                                                   std::shared_ptr<comm::ProcessGroup> group) {
  TANDEM_CHECK(module != nullptr, "parallel::convert_sync_batchnorm: module is null");
  TANDEM_CHECK(group != nullptr, "parallel::convert_sync_batchnorm: group is null");
  TANDEM_CHECK(group->devices().size() == 1, "parallel::convert_sync_batchnorm: the group has ",
               group->devices().size(),
               " devices per process, but synchronized batch norm supports one device per process");
  set_sync_recursively(*module, std::make_shared<GroupStatisticsSync>(std::move(group)));
  return module;
}

}  // namespace tandem::parallel
