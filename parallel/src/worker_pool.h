#pragma once
// The process-wide pool behind parallel_apply: one persistent worker thread per device, each with a FIFO queue.

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "tandem/core/device.h"

namespace tandem::parallel::detail {

// One thread that runs the tasks submitted to it, in submission order, with its device current and its device's
// generator stream selected. Tasks must not throw (run_on_devices wraps them so that they record their exception
// instead).
class DeviceWorker {
 public:
  explicit DeviceWorker(Device device);
  ~DeviceWorker();  // runs the tasks already queued, then joins the thread
  DeviceWorker(const DeviceWorker&) = delete;
  DeviceWorker& operator=(const DeviceWorker&) = delete;

  void submit(std::function<void()> task);
  // Runs `task` on the calling thread in this worker's place when the worker is idle (nothing queued, nothing
  // running), and returns true; returns false, running nothing, when it is busy. Meanwhile the worker starts nothing
  // (tasks submitted meanwhile run after `task`, in order), and the calling thread draws from the device's generator
  // stream and counts as a worker thread (a nested parallel call runs inline), as on the worker (Note [The caller
  // takes a turn] in parallel_apply.cpp). `task` must not throw.
  bool run_in_place(const std::function<void()>& task);

 private:
  void run();
  // Ends a run_in_place turn: the worker may run its queue again (and is woken when tasks came meanwhile).
  void end_turn();

  Device device_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;
  bool running_ = false;  // the worker runs a task
  bool lent_ = false;     // a caller runs a task in the worker's place (run_in_place)
  bool stopping_ = false;
  std::thread thread_;  // last: started once the members above exist
};

class WorkerPool {
 public:
  static WorkerPool& instance();
  // The worker of `device`, started on first use.
  DeviceWorker& worker(Device device);
  // Whether the calling thread is one of the pool's workers.
  static bool on_worker_thread();

 private:
  WorkerPool() = default;
  std::mutex mutex_;
  std::unordered_map<Device, std::unique_ptr<DeviceWorker>> workers_;
};

}  // namespace tandem::parallel::detail
