// The draws recorded by a DeviceGraph's capture (captured_draws.h; Note [Random draws in captured graphs] in
// tandem/core/random.h).

#include "cuda/captured_draws.h"

#include <algorithm>
#include <mutex>

#include "tandem/core/error.h"

namespace tandem::cuda {
namespace {

// The CapturedDraws of every capture open now, by capture id. Its mutex also guards what record() changes in them:
// draws may come from any thread while a capture is open (Note [Captured graphs] in device_graph.h).
struct Registry {
  std::mutex mutex;
  std::map<unsigned long long, CapturedDraws*> open;
};

Registry& registry() {
  static Registry registry;
  return registry;
}

}  // namespace

CapturedDraws::CapturedDraws(const std::vector<Device>& devices) {
  for (const Device& device : devices) {
    // No kernel writes them: a slot is read only by replays, after prepare_replay has uploaded it.
    devices_.push_back({.device = device,
                        .words = Tensor::empty({2 * static_cast<int64_t>(kStreamsPerDevice)}, DType::Int64, device)});
  }
}

CapturedDraws::~CapturedDraws() { detach(); }

void CapturedDraws::attach(unsigned long long capture_id) {
  Registry& open = registry();
  std::lock_guard<std::mutex> lock(open.mutex);
  open.open[capture_id] = this;
  capture_id_ = capture_id;
  attached_ = true;
}

void CapturedDraws::detach() noexcept {
  Registry& open = registry();
  std::lock_guard<std::mutex> lock(open.mutex);
  if (attached_) open.open.erase(capture_id_);
  attached_ = false;
}

CapturedDraws::Place CapturedDraws::record(unsigned long long capture_id, int device, uint64_t count,
                                           const char* caller) {
  Registry& open = registry();
  std::lock_guard<std::mutex> lock(open.mutex);
  const auto found = open.open.find(capture_id);
  TANDEM_CHECK(found != open.open.end(), caller, ": the compute stream of cuda:", device,
               " is being captured, but not by a DeviceGraph, so the draw could not be replayed; capture with "
               "DeviceGraph (Note [Random draws in captured graphs] in tandem/core/random.h)");
  return found->second->add(device, count, caller);
}

CapturedDraws::Place CapturedDraws::add(int device, uint64_t count, const char* caller) {
  const auto on_device = std::find_if(devices_.begin(), devices_.end(),
                                      [device](const Slots& slots) { return slots.device.index() == device; });
  TANDEM_CHECK(on_device != devices_.end(), caller, ": draws onto cuda:", device,
               ", whose stream is in a capture of a DeviceGraph over other devices");
  const detail::GeneratorStream stream = detail::current_stream();
  uint64_t& drawn = per_replay_[stream];  // an empty draw too: the eager one adds the stream's counter to the state
  const uint64_t offset = drawn;
  drawn += count;
  if (count == 0) return {.words = nullptr, .offset = offset};
  std::vector<detail::GeneratorStream>& streams = on_device->streams;
  auto slot = std::find(streams.begin(), streams.end(), stream);
  if (slot == streams.end()) {
    TANDEM_CHECK(streams.size() < kStreamsPerDevice, caller, ": a captured graph draws onto cuda:", device,
                 " from more than ", kStreamsPerDevice, " generator streams, more than it holds slots for");
    streams.push_back(stream);
    slot = streams.end() - 1;
  }
  const auto* words = static_cast<const uint64_t*>(on_device->words.data_ptr());
  return {.words = words + 2 * static_cast<size_t>(slot - streams.begin()), .offset = offset};
}

void CapturedDraws::prepare_replay() {
  if (per_replay_.empty()) return;
  std::map<detail::GeneratorStream, detail::Reservation> reserved;
  for (const auto& [stream, count] : per_replay_) reserved.emplace(stream, detail::reserve(stream, count));
  for (Slots& slots : devices_) {
    if (slots.streams.empty()) continue;
    slots.staged.clear();
    for (const detail::GeneratorStream& stream : slots.streams) {
      const detail::Reservation& at = reserved.at(stream);
      slots.staged.push_back(at.key);
      slots.staged.push_back(at.first);
    }
    const size_t bytes = slots.staged.size() * sizeof(uint64_t);
    if (slots.upload == nullptr) {
      slots.upload = {detail::create_staged_upload(slots.device.index(), bytes, kUploadSlots),
                      detail::destroy_staged_upload};
    }
    detail::staged_upload(*slots.upload, slots.staged.data(),
                          slots.words.narrow(0, 0, static_cast<int64_t>(slots.staged.size())));
  }
}

}  // namespace tandem::cuda
