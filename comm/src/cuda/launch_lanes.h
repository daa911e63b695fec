#pragma once
// The stream of each device's last NCCL launch in the single-process backend, and the one wait that keeps those
// launches in issue order when a launch moves to the device's other stream.

#include "tandem/core/cuda/collective_launch.h"

namespace tandem::comm::nccl {

// The streams a single-process NCCL launch runs on: the devices' compute streams (the synchronous collectives) or
// their communication streams (started all-reduces, Note [Deferred join] in collective.h).
enum class Lane { Compute, Comm };

// Note [One NCCL order per device]: the kernels of the single-process backend's communicators must run on each
// device in the order they were launched (the same order on every device, since launches are serialized by the
// CollectiveLaunchLock): two of them running at once on two streams of one device may wait for each other forever,
// or take each other's data when they share a communicator (NCCL leaves it undefined). On one stream that order
// holds by itself. The synchronous collectives run on the compute streams (no stream round trip: Note [Comm stream
// ordering] in collective.h) and the started all-reduces on the communication streams, so when a device's launch
// moves to its other stream, that stream first waits for everything issued so far on the one the previous launch
// used (an event recorded there now, which lies after that launch). Between launches on one stream nothing waits:
// a run of synchronous collectives costs no wait, and neither does a backward pass's series of started all-reduces.
//
// Makes `lane`'s stream of `device` follow the device's previous launch as above, and records `lane` as the stream
// of the launch about to be issued. Returns whether the stream waited (then it waits for all work issued on the
// device's other stream so far). The caller holds `lock` until its launch is issued; the wait is enqueued under it
// and points only to work issued earlier (Note [Launching collectives]). Creates the device's event on first use
// (an event holds no device memory).
bool enter_lane(const cuda::CollectiveLaunchLock& lock, int device, Lane lane);

}  // namespace tandem::comm::nccl
