#pragma once
// StepsInBackward: a ReplicatedOptimizer's step taken bucket by bucket while backward still runs, each bucket's
// parameters updated as soon as the bucket's gradient sum has started: TrainingStep's strategy where the optimizer
// allows (ReplicatedOptimizer::steps_in_backward()) and TrainingStepOptions::steps_in_backward, in its eager steps and
// in its captures. Internal to parallel.
//
//   parallel::StepsInBackward steps(optimizer, parallel::StepForm::Eager);
//   model.forward_backward(inputs, loss, true, parallel::ReplicaThreads::Workers, {},
//                          [&steps](size_t bucket) { steps.bucket_started(bucket); });
//   steps.finish();   // the parameters no bucket updated: afterwards, as after optimizer.step()
//
// Note [Optimizer steps in backward]: after the last gradient of a step, the plain step still has to sum the last
// bucket and then update every parameter (a pass that reads each parameter, gradient and state and writes two of
// them). Every other bucket's sum finished long before, beside backward (Note [Overlapped gradient reduction] in
// gradient_reducer.h), so its parameters' update can run then too, and only the last bucket's sum and its own update
// remain after backward. Here, right after the reducer starts a bucket's all-reduce (GradientReducer::begin's
// callback, on the thread that started it), every replica's optimizer updates the parameters whose gradients lie in
// that bucket (optim::Optimizer::step_parameters, Note [Stepping parameters apart] in optimizer.h) with its kernels
// on each device's communication stream, behind the all-reduce (Note [Updates on the communication stream] in
// fused.h). finish() then updates, on the compute streams, whatever no bucket did: the buckets the reducer summed in
// finish() (a parameter without a gradient in the step), those of a step that does not overlap (one bucket, or one
// replica in one process), and parameters that have no place in the buffers. Every parameter is updated exactly once
// per step with the kernels and arithmetic of the plain step, so the parameters and the optimizer's state are bitwise
// those of model.reduce_gradients(); optimizer.step().
//
// Why it is safe. A bucket's update on device d's communication stream is ordered after the bucket's all-reduce,
// which waits for the marker recorded on d's compute stream when the last gradient of the bucket was accumulated on
// replica d; so it runs after everything issued on the compute stream up to that marker. It must not overlap compute
// work issued after the marker that reads or writes what it touches:
//  - the gradients: the bucket's slices belong to the all-reduce from the marker on (all_reduce_async's rule);
//  - the optimizer's state: touched by nothing else. State that a first step creates (SGD's momentum buffer, Adam's
//    moments) is allocated and filled on the compute stream, so a bucket whose update would create state is left to
//    finish() (optim::Optimizer::creates_state): the first step of a run is a plain one;
//  - the parameters: replica d's backward reads a parameter (a weight, for the gradient of its layer's input) only in
//    the backward of an operation that used it in forward, and such an operation has an edge to the parameter's
//    accumulator. The engine runs a leaf's accumulator after every node with an edge to it (dependency counts), so
//    when the gradient is final, and the readiness hook fires, every read of the parameter by this backward has
//    been issued. A weight shared by two layers has two such edges and is final only after both layers' backward.
//    A node that writes a leaf's gradient in place (Note [Gradients written in place] in engine.cpp) fires the hook
//    from inside its backward: it must have issued its reads of that leaf before the write (the linear layer computes
//    its input gradient first; autograd::Function::write_leaf_gradient states the rule). Forward has been issued
//    entirely before backward begins. What is not covered: a parameter that forward reads through an alias without
//    an autograd edge (detach(), or a view taken under NoGradGuard) and whose value a later backward node reads.
//  - replica d's parameters are read only by replica d's graph; a replica without an input runs no backward.
// Then the join: the reducer's finish() makes each compute stream wait for its communication stream, after every
// callback has issued its updates (they run inside the backward of the replicas, which forward_backward joins
// before it finishes the reduction), so the next forward reads the updated parameters.
// On CPU devices the updates run at once, inside the callback, while the other replicas' backwards may still run on
// their threads; the same reasoning shows that none of them reads what is updated. Callbacks for different buckets
// may come from several threads at once; they take a lock, so the optimizers are used by one thread at a time.
// An exception in backward leaves the parameters of the buckets stepped so far updated, the others not.
// A captured step (TrainingStep's captured strategy) records the same thing with StepForm::Replayable: the learning rate and Adam's
// factors come from device memory, and finish_replay() counts Adam's steps after each replay.
// All of this holds only where a bucket's sum runs on the devices' communication streams, or is done when it returns
// (ReplicatedModule::sums_on_comm_streams(): the in-process collective on CUDA devices, or CPU devices); elsewhere
// TrainingStep takes the plain step. So DistributedDataParallel does not step in backward yet: its process
// group sums the buckets on streams of its own, which a device's communication stream does not follow (a later
// change can order each bucket's update after the group's sum by an event). Nor does a mix of CPU and CUDA devices.
// The plain API (model.reduce_gradients(); optimizer.step()) is unchanged: a backward that the caller runs itself
// has no step to update during.

#include <cstddef>
#include <mutex>
#include <vector>

#include "tandem/parallel/replicated_optimizer.h"

namespace tandem::parallel {

class StepsInBackward {
 public:
  // One step of `optimizer` (over its model(), which must outlive this) in `form`.
  // Errors: an optimizer whose steps_in_backward() is false.
  StepsInBackward(ReplicatedOptimizer& optimizer, StepForm form);
  StepsInBackward(const StepsInBackward&) = delete;
  StepsInBackward& operator=(const StepsInBackward&) = delete;

  // The reducer's callback (GradientReducer::begin): updates, on every replica, the parameters whose gradients lie
  // in `bucket`, on the devices' communication streams, unless that would create optimizer state (then finish()
  // does). Thread-safe. Errors: no such bucket; a bucket given twice; finish() called already; the optimizer's.
  void bucket_started(size_t bucket);
  // Updates every parameter that no bucket_started() updated, on the compute streams; afterwards the step is
  // complete. Errors: called twice; the optimizer's.
  void finish();

 private:
  ReplicatedOptimizer& optimizer_;
  const GradientLayout& layout_;  // the model's: which parameters each bucket holds
  const StepForm form_;
  std::mutex mutex_;               // guards what follows and the optimizers' use
  std::vector<char> stepped_;      // [parameter]
  std::vector<char> bucket_seen_;  // [bucket]
  bool finished_ = false;
};

}  // namespace tandem::parallel
