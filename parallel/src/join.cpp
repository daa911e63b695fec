#include "tandem/parallel/join.h"

#include <cstdint>
#include <vector>

#include "tandem/core/error.h"
#include "tandem/nn/normalization.h"

namespace tandem::parallel {

namespace {

constexpr const char* kJoin = "parallel::Join";

// The first batch norm under `module` that synchronizes its statistics, or null.
const nn::Module* synchronized_batch_norm(const nn::Module& module) {
  if (const auto* bn1d = dynamic_cast<const nn::BatchNorm1d*>(&module); bn1d && bn1d->statistics_sync()) return bn1d;
  if (const auto* bn2d = dynamic_cast<const nn::BatchNorm2d*>(&module); bn2d && bn2d->statistics_sync()) return bn2d;
  for (const std::shared_ptr<nn::Module>& child : module.children()) {
    if (const nn::Module* found = synchronized_batch_norm(*child)) return found;
  }
  return nullptr;
}

}  // namespace

Join::Join(DistributedDataParallel& model) : model_(model) {
  const nn::Module* synced = synchronized_batch_norm(*model.module());
  TANDEM_CHECK(synced == nullptr, kJoin, ": the model holds a ", synced ? synced->name() : "",
               " that synchronizes its statistics over the group (convert_sync_batchnorm); a process whose batches "
               "ran out does not run forward, so those reductions cannot be matched");
}

bool Join::next(int64_t rows) {
  TANDEM_CHECK(!done_, kJoin, "::next: every process has run out of batches (the last call returned false)");
  TANDEM_CHECK(rows >= 0, kJoin, "::next: rows is ", rows, " but expected >= 0");
  const std::vector<uint64_t> all = model_.group()->exchange(static_cast<uint64_t>(rows), "parallel::Join::next");
  int64_t global = 0;
  int active = 0;
  for (const uint64_t r : all) {
    TANDEM_CHECK(r <= static_cast<uint64_t>(INT64_MAX) - static_cast<uint64_t>(global), kJoin,
                 "::next: the processes' rows overflow int64");
    global += static_cast<int64_t>(r);
    active += r > 0;
  }
  rows_ = rows;
  global_rows_ = global;
  active_processes_ = active;
  done_ = active == 0;
  if (!done_) ++steps_;
  return !done_;
}

void Join::check_in_step(const char* caller) const {
  TANDEM_CHECK(steps_ > 0 && !done_, kJoin, "::", caller, ": no step started; call next(rows) first");
}

double Join::loss_weight() const {
  check_in_step("loss_weight");
  TANDEM_CHECK(!joined(), kJoin, "::loss_weight: this process has no rows in this step (it shadows the others)");
  const double processes = model_.options().reduction == comm::ReduceOp::Sum ? 1.0 : model_.group()->size();
  return static_cast<double>(rows_) * processes / static_cast<double>(global_rows_);
}

void Join::shadow() {
  check_in_step("shadow");
  TANDEM_CHECK(joined(), kJoin, "::shadow: this process has ", rows_, " rows in this step; train on them instead");
  TANDEM_CHECK(model_.syncing(), kJoin, "::shadow: called inside no_sync(); a joined step reduces every bucket");
  model_.zero_grad();
  model_.forward_backward({}, {});  // Note [A process without rows] in distributed.cpp
}

}  // namespace tandem::parallel
