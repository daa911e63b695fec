#pragma once
// ImmortalCache: a map whose values, once made, live for the rest of the process, and whose lookups take no lock.
// Nothing here needs CUDA: the CUDA backend keeps its NCCL communicators in one (communicators.cpp), and the cache's
// rules are tested without a GPU.

#include <atomic>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace tandem::comm::detail {

// Note [Lock-free communicator lookup]: a collective looks up the communicators of its device set on every call, so
// the lookup must cost no more than a few loads: no mutex (which every thread would share) and no node-based map.
// The cache publishes an immutable snapshot (an array of pointers to entries) through one atomic pointer:
//  - a lookup loads the snapshot (acquire) and searches it linearly (a process has a handful of device sets);
//  - a miss takes the mutex, looks again (another thread may have made the entry meanwhile), makes the value, and
//    publishes a new snapshot holding the old entries and the new one (release). Making values stays serialized,
//    which NCCL's ncclCommInitAll needs anyway, and a value is made once per key.
// Why it is safe: an entry is written completely before the release store that publishes the snapshot naming it,
// and a reader reaches entries only through a snapshot it loaded with acquire, so it sees them complete. Neither
// entries nor snapshots are changed or freed while the cache lives: a reader may still hold an old snapshot (no
// reference count tracks that), and callers keep references to values. Every key adds one entry and one snapshot,
// so the memory kept is bounded by the number of distinct keys (squared, in pointers). The cache owns them all and
// frees them when it is destroyed, which its owner does only once no thread can use it; the communicator cache is
// never destroyed (Note [Communicators are never destroyed] in cuda/communicators.cpp).
template <typename Key, typename Value>
class ImmortalCache {
 public:
  ImmortalCache() = default;
  ImmortalCache(const ImmortalCache&) = delete;
  ImmortalCache& operator=(const ImmortalCache&) = delete;

  // The value for `key`, made by make() (returning a Value) on the first call for that key, under the cache's mutex;
  // when make() throws, nothing is cached and the next call tries again. The reference stays valid as long as the
  // cache. Thread-safe; a hit takes no lock.
  template <typename Make>
  const Value& get(const Key& key, Make&& make) {
    if (const Value* found = find(published_.load(std::memory_order_acquire), key)) return *found;
    std::lock_guard<std::mutex> lock(creation_);
    const Snapshot* current = published_.load(std::memory_order_relaxed);  // only this mutex's holder stores it
    if (const Value* found = find(current, key)) return *found;
    entries_.push_back(std::make_unique<const Entry>(Entry{key, make()}));
    auto next = std::make_unique<Snapshot>(*current);
    next->entries.push_back(entries_.back().get());
    published_.store(next.get(), std::memory_order_release);
    snapshots_.push_back(std::move(next));
    return entries_.back()->value;
  }

  // How many values have been made (a snapshot's size; for tests and diagnostics).
  size_t size() const { return published_.load(std::memory_order_acquire)->entries.size(); }

 private:
  struct Entry {
    Key key;
    Value value;
  };
  struct Snapshot {
    std::vector<const Entry*> entries;
  };

  static const Value* find(const Snapshot* snapshot, const Key& key) {
    for (const Entry* entry : snapshot->entries) {
      if (entry->key == key) return &entry->value;
    }
    return nullptr;
  }

  std::mutex creation_;
  std::vector<std::unique_ptr<const Entry>> entries_;       // every entry made; guarded by creation_
  std::vector<std::unique_ptr<const Snapshot>> snapshots_;  // every snapshot published but the first; likewise
  const Snapshot empty_{};
  std::atomic<const Snapshot*> published_{&empty_};
};

}  // namespace tandem::comm::detail
