#pragma once
// FNV-1a, 64 bits: a hash of bytes that tells things apart (data sets in a run's setup, module names across
// processes, the key of a captured step's batch). Not cryptographic: it does not defend against forgery. The one home
// of its constants.

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tandem {

class Fnv1a {
 public:
  void add(const void* data, size_t size) {
    const auto* bytes = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < size; ++i) hash_ = (hash_ ^ bytes[i]) * kPrime;
  }
  void add(std::string_view text) { add(text.data(), text.size()); }
  // The eight bytes of `value`, least significant first, on every host.
  void add_word(uint64_t value) {
    for (int byte = 0; byte < 8; ++byte) hash_ = (hash_ ^ ((value >> (8 * byte)) & 0xff)) * kPrime;
  }
  uint64_t value() const { return hash_; }

 private:
  static constexpr uint64_t kOffsetBasis = 0xcbf29ce484222325ULL;
  static constexpr uint64_t kPrime = 0x100000001b3ULL;
  uint64_t hash_ = kOffsetBasis;
};

}  // namespace tandem
