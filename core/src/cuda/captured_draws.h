#pragma once
// CapturedDraws: the random draws that one DeviceGraph's capture recorded, and what each replay of the graph draws
// (Note [Random draws in captured graphs] in tandem/core/random.h).

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "generator.h"
#include "staged_upload.h"
#include "tandem/core/device.h"
#include "tandem/core/tensor.h"

namespace tandem::cuda {

class CapturedDraws {
 public:
  // The generator streams that one capture may draw from onto one device.
  static constexpr size_t kStreamsPerDevice = 8;
  // Replays the host may run ahead of a device before an upload waits (Note [Pinned upload slots]).
  static constexpr size_t kUploadSlots = 16;

  // Slots for the graph's devices. Made before the capture begins: the slots are written between replays, so they
  // must not be memory that the captured work may use as well (Note [Capture pool] in cuda/caching_allocator.cpp).
  explicit CapturedDraws(const std::vector<Device>& devices);
  ~CapturedDraws();
  CapturedDraws(const CapturedDraws&) = delete;
  CapturedDraws& operator=(const CapturedDraws&) = delete;

  // While attached, draws onto the streams of capture `capture_id` are recorded here (record()).
  void attach(unsigned long long capture_id);
  void detach() noexcept;

  // Where a captured kernel finds its values: the stream's key at words[0], and value words[1] + offset + i for
  // element i.
  struct Place {
    const uint64_t* words;
    uint64_t offset;
  };
  // Records a draw of `count` values from the calling thread's stream by a kernel on CUDA device `device`, in the
  // capture `capture_id`. Errors: no CapturedDraws attached to that capture (a capture begun outside DeviceGraph); a
  // device that is not one of its graph's; more than kStreamsPerDevice streams drawing onto one device.
  static Place record(unsigned long long capture_id, int device, uint64_t count, const char* caller);

  // Before a replay: reserves from each recorded stream what one replay draws from it and uploads every slot's
  // [key, base] on its device's compute stream (not waiting for the copies). Does nothing when nothing was recorded.
  void prepare_replay();

 private:
  struct Slots {
    Device device;
    Tensor words;                                    // int64 [2 * kStreamsPerDevice]: [key, base] per slot
    std::vector<detail::GeneratorStream> streams{};  // [slot]: the stream whose position slot holds
    std::vector<uint64_t> staged{};                  // the words of the next upload
    std::unique_ptr<detail::StagedUpload, void (*)(detail::StagedUpload*)> upload{nullptr, nullptr};
  };

  Place add(int device, uint64_t count, const char* caller);

  std::vector<Slots> devices_;
  std::map<detail::GeneratorStream, uint64_t> per_replay_;  // values of each stream drawn by one replay
  unsigned long long capture_id_ = 0;
  bool attached_ = false;
};

}  // namespace tandem::cuda
