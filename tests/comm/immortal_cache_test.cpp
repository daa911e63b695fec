// ImmortalCache (comm/src/immortal_cache.h), the lock-free cache of the CUDA backend's NCCL communicators: a value is
// made once per key, under threads too, its reference stays valid while other keys are added, and a failed make()
// caches nothing.

#include "immortal_cache.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "support/test_support.h"

namespace tandem {
namespace {

using Cache = comm::detail::ImmortalCache<std::vector<int>, std::string>;

std::string name_of(const std::vector<int>& key) {
  std::string name;
  for (int k : key) name += std::to_string(k) + ",";
  return name;
}

TEST(ImmortalCache, MakesEachValueOnceAndKeepsItsAddress) {
  Cache cache;
  int made = 0;
  const auto make_for = [&](const std::vector<int>& key) {
    return [&made, key] {
      ++made;
      return name_of(key);
    };
  };
  const std::string& first = cache.get({0, 1}, make_for({0, 1}));
  EXPECT_EQ(first, "0,1,");
  for (int k = 2; k < 40; ++k) cache.get({0, k}, make_for({0, k}));  // many republished snapshots
  EXPECT_EQ(made, 39);
  EXPECT_EQ(&cache.get({0, 1}, make_for({0, 1})), &first);
  EXPECT_EQ(cache.get({0, 17}, make_for({0, 17})), "0,17,");
  EXPECT_EQ(made, 39);
  EXPECT_EQ(cache.size(), 39u);
}

TEST(ImmortalCache, AFailedMakeCachesNothing) {
  Cache cache;
  EXPECT_ERROR(cache.get({3}, []() -> std::string { TANDEM_FAIL("make: got no devices"); }), "make: got no devices");
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.get({3}, [] { return std::string("three"); }), "three");
  EXPECT_EQ(cache.size(), 1u);
}

// Threads look up and add keys at once (several threads per key): every key is made exactly once, and every thread
// sees the value made for its key, at one address.
TEST(ImmortalCache, ThreadsAddingAndLookingUpKeysAgree) {
  Cache cache;
  constexpr int kThreads = 8;
  constexpr int kKeys = 24;
  constexpr int kRounds = 200;
  std::vector<std::atomic<int>> made(kKeys);
  std::vector<std::vector<const std::string*>> seen(kThreads, std::vector<const std::string*>(kKeys, nullptr));
  std::atomic<int> wrong{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      while (!go.load()) std::this_thread::yield();
      for (int round = 0; round < kRounds; ++round) {
        const int k = (round * 7 + t * 5) % kKeys;
        const std::vector<int> key = {k, k + 1};
        const std::string& value = cache.get(key, [&] {
          made[static_cast<size_t>(k)].fetch_add(1);
          return name_of(key);
        });
        if (value != name_of(key)) wrong.fetch_add(1);
        const std::string*& first = seen[static_cast<size_t>(t)][static_cast<size_t>(k)];
        if (first != nullptr && first != &value) wrong.fetch_add(1);
        first = &value;
      }
    });
  }
  go.store(true);
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
  for (int k = 0; k < kKeys; ++k) EXPECT_EQ(made[static_cast<size_t>(k)].load(), 1) << "key " << k;
  for (int k = 0; k < kKeys; ++k) {
    for (int t = 1; t < kThreads; ++t) {
      if (seen[0][static_cast<size_t>(k)] != nullptr &&
          seen[static_cast<size_t>(t)][static_cast<size_t>(k)] != nullptr) {
        EXPECT_EQ(seen[0][static_cast<size_t>(k)], seen[static_cast<size_t>(t)][static_cast<size_t>(k)]);
      }
    }
  }
  EXPECT_EQ(cache.size(), static_cast<size_t>(kKeys));
}

}  // namespace
}  // namespace tandem
