#pragma once
// The JSON header of a safetensors file, parsed from untrusted bytes and checked against the format's rules
// (https://github.com/huggingface/safetensors#format) before anything is allocated for the data.

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "json/untrusted_json.h"
#include "tandem/core/dtype.h"
#include "tandem/core/shape.h"

namespace tandem::safetensors {

constexpr size_t kHeaderLengthBytes = 8;  // the little-endian uint64 before the header
constexpr const char* kMetadataKey = "__metadata__";  // the header's entry of string metadata

// Limits on hostile headers. The first two are the reference loader's; the others bound what a header may make this
// reader allocate (each tensor costs a Tensor) and are far above what real checkpoints use.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr size_t kMaxNestingDepth = json::kMaxUntrustedDepth;  // arrays and objects open at once anywhere in the header
constexpr size_t kMaxTensors = 1'000'000;
constexpr size_t kMaxRank = 64;  // PyTorch's limit on dimensions

// The format's name of each DType ("F32", "I64", "BF16"): the one table that the writer and the reader share.
std::string_view format_dtype(DType dtype);

struct TensorEntry {
  std::string name;
  DType dtype = DType::Float32;
  Shape shape;
  uint64_t begin = 0;  // data_offsets, in bytes from the start of the data section
  uint64_t end = 0;
};

struct Header {
  std::vector<TensorEntry> tensors;  // in data order: by begin (zero-size tensors at one offset by name)
  std::map<std::string, std::string> metadata;
};

// Parses `json`, the header bytes after the length, of a file whose data section (everything after the header)
// holds `data_size` bytes.
// Requires: json.size() <= kMaxHeaderBytes.
// Ensures: every tensor is F32, I64 or BF16 with a valid shape whose byte count equals its data_offsets range, and the ranges,
// sorted, tile the data section exactly: the first begins at 0, each begins where the previous ends, the last ends
// at data_size.
// Errors (tandem::Error, prefixed with `where`; untrusted text quoted with excerpt()): a header that does not start
// with '{', nests deeper than kMaxNestingDepth, is not valid UTF-8 JSON, repeats a key in any object, has more than
// kMaxTensors tensors, or breaks the schema (an entry is {"dtype", "shape", "data_offsets"} and nothing else;
// "__metadata__" maps strings to strings); an unsupported dtype; a shape with a size that is not an integer in
// [0, 2^63 - 1], more than kMaxRank sizes, or more than 2^63 - 1 bytes of data; data_offsets that are not two
// non-negative integers, end before they begin, lie outside the data section or disagree with the shape; ranges that
// overlap or leave bytes of the data section uncovered (a gap, bytes before the first or after the last tensor).
Header parse_header(std::string_view json, uint64_t data_size, const std::string& where);

}  // namespace tandem::safetensors
