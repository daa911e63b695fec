#pragma once
// The collective launch lock of the CUDA backends (core ops, comm) and the calling thread's "inside a collective
// launch" flag that it sets. Nothing here needs CUDA, so it is built (and its rules are tested) without a GPU too.

#include <mutex>

namespace tandem::cuda {

// Note [Launching collectives]: the kernels of one NCCL collective wait for one another on the devices, so once the
// first of them is launched it can only finish after the last one is launched too. Two things that another host
// thread could do between those launches would then hang the process:
//  - make a stream of a participating device that does not yet hold its collective kernel wait for an event
//    recorded after the kernel already launched on another participating device: a cycle between the devices, once
//    the remaining kernel is launched behind that wait (the cross-device waits of comm's peer copies, Note [Comm
//    peer copy ordering], and core's cross-device copies make such events common);
//  - call cudaDeviceSynchronize or cudaFree on a participating device: that thread waits for the launched kernel
//    while holding driver locks that the remaining launches need.
// So the comm backend launches every collective while holding a CollectiveLaunchLock, and stream_wait and the
// caching allocator's release of memory to the driver hold a CollectiveLaunchExclusion: both take one process-wide
// mutex, so none of them can fall between two launches of one collective. Collectives are also launched one at a
// time, which NCCL needs (one thread at a time per communicator, and every rank sees the collectives in the same
// order).
//
// Note [No device allocation during a collective launch]: the thread that launches a collective must not allocate
// or free device memory until the launch is done: cudaMalloc and cudaFree may wait for the kernels it has already
// launched, and the caching allocator takes the launch mutex while holding its own lock (to release memory), so even
// a cached allocation could deadlock against another thread. This is checked, not just stated: a CollectiveLaunchLock
// marks its thread as inside a collective launch until it is destroyed, and the caching allocator asserts
// (TANDEM_INTERNAL_ASSERT, through assert_not_launching_collective) that the flag is not set; so do the two guards
// themselves, since the mutex is not recursive. Callers allocate every buffer before they launch.

// Held while launching the kernels of one collective. Errors: InternalError when the thread is already inside a
// collective launch.
class CollectiveLaunchLock {
 public:
  CollectiveLaunchLock();
  ~CollectiveLaunchLock();
  CollectiveLaunchLock(const CollectiveLaunchLock&) = delete;
  CollectiveLaunchLock& operator=(const CollectiveLaunchLock&) = delete;

 private:
  std::unique_lock<std::mutex> lock_;
};

// Held by work that must not fall between two launches of one collective and is no launch itself (stream_wait,
// releasing device memory to the driver): takes the same mutex, without marking the thread. Errors: InternalError
// when the thread is inside a collective launch.
class CollectiveLaunchExclusion {
 public:
  CollectiveLaunchExclusion();
  CollectiveLaunchExclusion(const CollectiveLaunchExclusion&) = delete;
  CollectiveLaunchExclusion& operator=(const CollectiveLaunchExclusion&) = delete;

 private:
  std::unique_lock<std::mutex> lock_;
};

// Whether the calling thread holds a CollectiveLaunchLock.
bool inside_collective_launch() noexcept;

// Throws InternalError "<caller>: <action> while this thread launches a collective (...)" when it does.
void assert_not_launching_collective(const char* caller, const char* action);

}  // namespace tandem::cuda
