#pragma once
// JSON from files that users hand us (safetensors headers, checkpoint metadata): parsed with bounded nesting and
// without duplicate keys, every failure a tandem::Error. Internal to the library (not installed).

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string_view>

namespace tandem::json {

// The default nesting bound: deep enough for any file tandem writes, shallow enough that the recursive parts of
// nlohmann::json (destruction, dump) stay far from the stack's end.
inline constexpr size_t kMaxUntrustedDepth = 64;

// The checks on the raw bytes before a parser sees them. Throws Error starting with `where` when `text` opens more
// than `max_depth` arrays and objects at once (see Note [Depth before parsing]), or holds a NUL byte outside a string:
// nlohmann's parser takes a NUL for the end of the input, so whatever followed it would be ignored where a strict
// reader (the safetensors reference loader) refuses the file. Brackets inside strings do not count (a NUL there is
// the parser's to refuse); unbalanced text is left for a parser to refuse.
void check_raw_json(std::string_view text, std::string_view where, size_t max_depth = kMaxUntrustedDepth);

// Parses `text`. Throws Error starting with `where` when it nests more than `max_depth` arrays/objects, when an
// object repeats a key, or when it is not valid JSON (messages quote at most a short excerpt of the text).
nlohmann::json parse_untrusted(std::string_view text, std::string_view where,
                               size_t max_depth = kMaxUntrustedDepth);

}  // namespace tandem::json
