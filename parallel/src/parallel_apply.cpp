#include "tandem/parallel/parallel_apply.h"

#include <algorithm>
#include <exception>
#include <latch>
#include <string>
#include <utility>
#include <vector>

#include "tandem/core/error.h"
#include "tandem/core/autocast.h"
#include "tandem/core/grad_mode.h"
#include "tandem/core/random.h"
#include "worker_pool.h"

namespace tandem::parallel {

namespace {

std::string describe(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

}  // namespace

// Note [One latch per call]: each call counts its own tasks down on a latch in its own frame, so calls from several
// threads at once interleave on the workers' queues without waiting for each other (no task ever waits for
// another). A task records its exception in its own slot and counts down last: once the latch opens, no worker
// touches the caller's frame again. A call made from a worker thread (a replica that itself runs data_parallel)
// runs its tasks on that thread, since queueing behind itself would never finish.
void run_on_devices(const std::vector<std::function<void()>>& tasks, const std::vector<Device>& devices,
                    ReplicaThreads threads) {
  TANDEM_CHECK(tasks.size() == devices.size(), "parallel::run_on_devices: got ", tasks.size(), " tasks for ",
               devices.size(), " devices");
  const size_t n = tasks.size();
  std::vector<std::exception_ptr> errors(n);
  std::latch done(static_cast<std::ptrdiff_t>(n));
  const bool grad_mode = GradMode::is_enabled();
  const std::optional<Precision> autocast = autocast_precision();
  auto run_one = [&tasks, &errors, &done, grad_mode, autocast](size_t i) {
    try {
      GradModeGuard mode(grad_mode);
      tandem::detail::AutocastStateGuard autocast_state(autocast);
      tasks[i]();
    } catch (...) {
      errors[i] = std::current_exception();
    }
    done.count_down();
  };

  if (threads == ReplicaThreads::Caller) {
    for (size_t i = 0; i < n; ++i) {
      const GeneratorStreamGuard stream(devices[i]);
      run_one(i);
    }
  } else if (detail::WorkerPool::on_worker_thread()) {
    for (size_t i = 0; i < n; ++i) run_one(i);
  } else {
    // Note [The caller takes a turn]: the calling thread would only wait for the workers, so it runs task 0 itself in
    // its worker's place when that worker is idle (DeviceWorker::run_in_place), after handing the others out: one
    // hand-off fewer per call (none for one device), whose wake-ups cost more than a small step's work. Task 0 still
    // runs in its device's turn, with its generator stream; when its worker is busy (another caller's task) or
    // another task shares its device (which must run after it), it is queued as before.
    detail::WorkerPool& pool = detail::WorkerPool::instance();
    const bool shared = n == 0 || std::find(devices.begin() + 1, devices.end(), devices.front()) != devices.end();
    bool first_pending = !shared;  // task 0 is still to be run in place
    size_t submitted = shared ? 0 : 1;
    try {
      for (; submitted < n; ++submitted) {
        pool.worker(devices[submitted]).submit([&run_one, i = submitted] { run_one(i); });
      }
      if (first_pending) {
        detail::DeviceWorker& first = pool.worker(devices.front());
        first_pending = false;
        if (!first.run_in_place([&run_one] { run_one(0); })) first.submit([&run_one] { run_one(0); });
      }
    } catch (...) {  // no worker could be started: the tasks not handed out fail with that reason
      for (size_t i = submitted; i < n; ++i) {
        errors[i] = std::current_exception();
        done.count_down();
      }
      if (first_pending) {
        errors[0] = std::current_exception();
        done.count_down();
      }
    }
  }
  done.wait();

  for (size_t i = 0; i < n; ++i) {
    if (errors[i]) TANDEM_FAIL("in replica ", i, " on device ", devices[i], ": ", describe(errors[i]));
  }
}

std::vector<std::vector<Tensor>> parallel_apply(const std::vector<std::shared_ptr<nn::Module>>& replicas,
                                                const std::vector<std::vector<Tensor>>& inputs,
                                                const std::vector<Device>& devices) {
  constexpr const char* fn = "parallel::parallel_apply";
  TANDEM_CHECK(replicas.size() == inputs.size(), fn, ": got ", replicas.size(), " replicas but ", inputs.size(),
               " inputs");
  TANDEM_CHECK(devices.empty() || devices.size() == replicas.size(), fn, ": got ", devices.size(),
               " devices for ", replicas.size(), " replicas");
  std::vector<Device> run_devices;
  run_devices.reserve(inputs.size());
  for (size_t i = 0; i < replicas.size(); ++i) {
    TANDEM_CHECK(replicas[i] != nullptr, fn, ": replica ", i, " is null");
    TANDEM_CHECK(!inputs[i].empty(), fn, ": inputs of replica ", i, " are empty");
    for (size_t j = 0; j < inputs[i].size(); ++j)
      TANDEM_CHECK(inputs[i][j].defined(), fn, ": input ", j, " of replica ", i, " is undefined");
    run_devices.push_back(inputs[i].front().device());
  }
  for (const Device& device : devices) check_device_available(device, fn);

  std::vector<std::vector<Tensor>> outputs(replicas.size());
  std::vector<std::function<void()>> tasks;
  tasks.reserve(replicas.size());
  for (size_t i = 0; i < replicas.size(); ++i) {
    tasks.emplace_back([&, i] {
      std::vector<Tensor> replica_outputs = replicas[i]->forward_all(inputs[i]);
      if (!devices.empty())
        for (Tensor& output : replica_outputs) output = output.to(devices[i]);
      outputs[i] = std::move(replica_outputs);
    });
  }
  run_on_devices(tasks, run_devices);
  return outputs;
}

std::vector<Tensor> parallel_apply(const std::vector<std::shared_ptr<nn::Module>>& replicas,
                                   const std::vector<Tensor>& inputs, const std::vector<Device>& devices) {
  constexpr const char* fn = "parallel::parallel_apply";
  std::vector<std::vector<Tensor>> input_lists;
  input_lists.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    TANDEM_CHECK(inputs[i].defined(), fn, ": input ", i, " is undefined");
    input_lists.push_back({inputs[i]});
  }
  std::vector<std::vector<Tensor>> output_lists = parallel_apply(replicas, input_lists, devices);
  std::vector<Tensor> outputs;
  outputs.reserve(output_lists.size());
  for (size_t i = 0; i < output_lists.size(); ++i)
    outputs.push_back(nn::detail::single_output(*replicas[i], std::move(output_lists[i]), fn));
  return outputs;
}

}  // namespace tandem::parallel
