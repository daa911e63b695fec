#include "worker_pool.h"

#include "tandem/core/error.h"
#include "tandem/core/random.h"

namespace tandem::parallel::detail {

namespace {
thread_local bool is_worker_thread = false;
}  // namespace

DeviceWorker::DeviceWorker(Device device) : device_(device), thread_([this] { run(); }) {}

DeviceWorker::~DeviceWorker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void DeviceWorker::submit(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(task));
  }
  wake_.notify_one();
}

bool DeviceWorker::run_in_place(const std::function<void()>& task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (running_ || lent_ || !queue_.empty()) return false;
    lent_ = true;
  }
  // The turn is given back even when the task throws: the worker must never wait for a turn that is not coming back.
  struct Turn {
    DeviceWorker& worker;
    const bool was_worker = is_worker_thread;
    ~Turn() {
      is_worker_thread = was_worker;
      worker.end_turn();
    }
  } turn{*this};
  is_worker_thread = true;
  const GeneratorStreamGuard stream(device_);
  task();
  return true;
}

void DeviceWorker::end_turn() {
  bool queued = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    lent_ = false;
    queued = !queue_.empty();
  }
  if (queued) wake_.notify_one();  // the tasks submitted meanwhile; an idle worker is not woken for nothing
}

void DeviceWorker::run() {
  is_worker_thread = true;
  // Every random draw of this thread's tasks comes from this device's stream (Note [Generator streams]).
  const GeneratorStreamGuard stream(device_);
  // Once, so that the per-op device selections on this thread become no-ops. A device that cannot be selected is
  // reported by the first task's ops, with the replica named; the worker itself must not die of it.
  try {
    set_current_device(device_);
  } catch (const Error&) {
  }
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return !lent_ && (stopping_ || !queue_.empty()); });
      if (queue_.empty()) return;  // stopping, nothing left to run
      task = std::move(queue_.front());
      queue_.pop_front();
      running_ = true;
    }
    task();
    std::lock_guard<std::mutex> lock(mutex_);
    running_ = false;
  }
}

// Note [Worker pool lifetime]: the pool is a function-local static, created by the first parallel call and
// destroyed at exit, after main returns. Its destructor joins every worker: an idle worker wakes, finds its queue
// empty and returns; a worker still running a task (a thread that outlived main) finishes it first. Workers own
// no resources of other static objects (the tasks only hold references into their caller's frame, which waits
// for them), so joining them does not depend on the destruction order of other statics. Calling parallel
// functions from static destructors that run after the pool's is not supported.
WorkerPool& WorkerPool::instance() {
  static WorkerPool pool;
  return pool;
}

DeviceWorker& WorkerPool::worker(Device device) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::unique_ptr<DeviceWorker>& worker = workers_[device];
  if (!worker) worker = std::make_unique<DeviceWorker>(device);
  return *worker;
}

bool WorkerPool::on_worker_thread() { return is_worker_thread; }

}  // namespace tandem::parallel::detail
