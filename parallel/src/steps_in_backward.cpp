#include "steps_in_backward.h"

#include "tandem/core/error.h"

namespace tandem::parallel {

namespace {
constexpr const char* kStepsInBackward = "parallel::StepsInBackward";
}  // namespace

StepsInBackward::StepsInBackward(ReplicatedOptimizer& optimizer, StepForm form) : optimizer_(optimizer), layout_(optimizer.model().gradient_layout()), form_(form) {
  TANDEM_CHECK(optimizer_.steps_in_backward(), kStepsInBackward,
               ": the optimizer does not step in backward (ReplicatedOptimizer::steps_in_backward() is false)");
  stepped_.assign(layout_.parameter_count(), 0);
  bucket_seen_.assign(layout_.buckets().size(), 0);
}

void StepsInBackward::bucket_started(size_t bucket) {
  std::lock_guard<std::mutex> lock(mutex_);
  TANDEM_CHECK(!finished_, kStepsInBackward, "::bucket_started: bucket ", bucket, " after finish()");
  TANDEM_CHECK(bucket < bucket_seen_.size(), kStepsInBackward, "::bucket_started: bucket ", bucket,
               " but the layout has ", bucket_seen_.size());
  TANDEM_CHECK(!bucket_seen_[bucket], kStepsInBackward, "::bucket_started: bucket ", bucket,
               " came twice but expected each bucket once per step");
  bucket_seen_[bucket] = 1;
  const std::vector<size_t>& parameters = layout_.bucket_parameters(bucket);
  // Note [Optimizer steps in backward]: state is created on the compute stream, by finish().
  if (optimizer_.creates_state(parameters)) return;
  optimizer_.step_parameters(parameters, form_, UpdateStream::Communication);
  for (const size_t i : parameters) stepped_[i] = 1;
}

void StepsInBackward::finish() {
  std::lock_guard<std::mutex> lock(mutex_);
  TANDEM_CHECK(!finished_, kStepsInBackward, "::finish: the step is finished already");
  finished_ = true;
  std::vector<size_t> rest;
  for (size_t i = 0; i < stepped_.size(); ++i) {
    if (!stepped_[i]) rest.push_back(i);
  }
  optimizer_.step_parameters(rest, form_, UpdateStream::Compute);
}

}  // namespace tandem::parallel
