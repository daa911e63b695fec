#pragma once
// parallel::parallel_apply: runs replica i on input i, concurrently, on a persistent pool of worker threads with one
// worker per device.

#include <concepts>
#include <functional>
#include <memory>
#include <vector>

#include "tandem/core/device.h"
#include "tandem/core/tensor.h"
#include "tandem/nn/module.h"

namespace tandem::parallel {

// Output i is replicas[i]->forward(inputs[i]), run on the worker of inputs[i].device() (replica 0 on the calling
// thread in its worker's place when that worker is idle and no other replica shares its device: Note [The caller
// takes a turn] in parallel_apply.cpp); replicas whose inputs share a device run one after another on that device's
// worker. Workers run with the caller's grad mode and autocast state (tandem/core/autocast.h), and the random
// draws of replica i come from the generator stream of inputs[i].device(), so they do not depend on thread timing
// (Note [Generator streams] in tandem/core/random.h). `devices`, when not empty, gives one device per replica and
// output i is moved there. Returns after every replica has finished.
// Errors: replicas.size() != inputs.size() or != devices.size() (when given); a null replica; an undefined input.
// An exception thrown by a replica is rethrown here (once all have finished) as tandem::Error with the message
// "in replica i on device d: <what>", for the lowest such i. Safe to call from several threads at once, and from
// inside a replica (a nested call runs its work, and draws, on the calling thread).
std::vector<Tensor> parallel_apply(const std::vector<std::shared_ptr<nn::Module>>& replicas,
                                   const std::vector<Tensor>& inputs, const std::vector<Device>& devices = {});

// The general form, for modules with several inputs or outputs (Note [Two forms of forward] in nn/module.h):
// outputs[i] is replicas[i]->forward_all(inputs[i]), run on the worker of inputs[i][0].device(); every other rule is
// the one-tensor form's, and `devices` moves every output of replica i to devices[i]. The one-tensor form is this
// with one-element lists, each replica returning exactly one output.
// Errors: as the one-tensor form; also an empty input list ("inputs of replica i are empty") and an undefined
// tensor ("input j of replica i is undefined").
std::vector<std::vector<Tensor>> parallel_apply(const std::vector<std::shared_ptr<nn::Module>>& replicas,
                                                const std::vector<std::vector<Tensor>>& inputs,
                                                const std::vector<Device>& devices = {});

// Typed conveniences for the replicas returned by the typed replicate.
template <class M>
  requires std::derived_from<M, nn::Module> && (!std::same_as<M, nn::Module>)
std::vector<Tensor> parallel_apply(const std::vector<std::shared_ptr<M>>& replicas, const std::vector<Tensor>& inputs,
                                   const std::vector<Device>& devices = {}) {
  return parallel_apply(std::vector<std::shared_ptr<nn::Module>>(replicas.begin(), replicas.end()), inputs, devices);
}
template <class M>
  requires std::derived_from<M, nn::Module> && (!std::same_as<M, nn::Module>)
std::vector<std::vector<Tensor>> parallel_apply(const std::vector<std::shared_ptr<M>>& replicas,
                                                const std::vector<std::vector<Tensor>>& inputs,
                                                const std::vector<Device>& devices = {}) {
  return parallel_apply(std::vector<std::shared_ptr<nn::Module>>(replicas.begin(), replicas.end()), inputs, devices);
}

// Where run_on_devices runs its tasks: each on its device's worker, concurrently (the default); or one after another
// on the calling thread, each drawing from its device's generator stream (Note [Generator streams]) as the worker
// would, for work that must be issued from one thread, such as the capture of a CUDA graph (parallel::TrainingStep).
enum class ReplicaThreads { Workers, Caller };

// The pool itself, for work that is not a module forward: runs tasks[i] on the worker of devices[i] (same rules:
// concurrent across devices, in order on one device, caller's grad mode and autocast state, first failure rethrown as
// "in replica i on device d: <what>"), or on the calling thread (`threads`). tasks.size() must equal devices.size().
void run_on_devices(const std::vector<std::function<void()>>& tasks, const std::vector<Device>& devices,
                    ReplicaThreads threads = ReplicaThreads::Workers);

}  // namespace tandem::parallel
