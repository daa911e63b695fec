// Storage on the host: its destructor is the start of every free path, which must not throw (Note [No throw on free
// paths]); the CUDA side is in cuda_allocator_test.cpp.

#include <type_traits>

#include "support/test_support.h"

namespace tandem {
namespace {

static_assert(std::is_nothrow_destructible_v<Storage>, "Storage's destructor starts a free path: it must not throw");

TEST(Storage, ReleasesHostBytesWhileAnExceptionUnwinds) {
  const Device cpu = Device::cpu(1);
  const size_t before = memory_stats(cpu).allocated_bytes;
  try {
    Storage first(cpu, 1000);  // rounds to 1024 bytes
    Storage second(cpu, 64);
    EXPECT_EQ(memory_stats(cpu).allocated_bytes, before + 1024 + 64);
    TANDEM_FAIL("fn: failure while the storages are alive");
  } catch (const Error&) {
  }
  EXPECT_EQ(memory_stats(cpu).allocated_bytes, before);
}

}  // namespace
}  // namespace tandem
