#pragma once
// Saving and loading tensors in the safetensors format (https://github.com/huggingface/safetensors): an 8-byte
// little-endian header length N, N bytes of JSON
//   {"fc1.weight": {"dtype": "F32", "shape": [20, 10], "data_offsets": [0, 800]}, ..., "__metadata__": {...}}
// padded with spaces to a multiple of 8, then the raw little-endian data. Tensors of every dtype are written and read:
// float32 as "F32", int64 as "I64", bfloat16 as "BF16". A file written by save() opens in PyTorch with
// safetensors.torch.load_file.
//
// Writes go through AtomicFile (tandem/core/atomic_file.h): a reader sees either the old file or the new one, never a
// partial one; a symlinked path stays a link, an existing file keeps its permission bits, and a path that is a
// directory, a device or a FIFO is refused with an Error.
//
// Reads treat every file as hostile and are as strict as the reference loader: only a regular file is opened (a
// FIFO, a directory or a device is refused without blocking); the header is at most 100,000,000 bytes, a JSON
// object of valid UTF-8 that nests at most 64 levels and repeats no key in any object; it describes at most
// 1,000,000 tensors, each {"dtype": "F32" | "I64" | "BF16", "shape": [at most 64 sizes], "data_offsets": [begin, end]}
// with no other key, whose byte range matches its shape; sorted, the ranges cover the data section exactly (no gap, no
// overlap, no trailing bytes); "__metadata__" maps strings to strings. Each tensor's bytes are read straight into its
// storage: loading holds the header once and the tensors' data once (plus a small record per tensor). A file that
// cannot be read is a tandem::Error "<function>: '<path>': ..." that quotes untrusted text with excerpt().

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tandem/core/tensor.h"
#include "tandem/nn/module.h"

namespace tandem {

// Writes module.state_dict(), the parameters and the buffers, each distinct tensor once: a tensor shared under
// several names (Note [Shared parameters] in nn/module.h) under its first one, names.front() of
// module.state_tensors(). The format allows no two entries over one storage; PyTorch's safetensors.torch.save_model
// drops the aliases too (it keeps one name, and its load_model accepts a file with any one of them).
void save(const nn::Module& module, const std::string& path);
// Copies the file's tensors into the module's existing parameters and buffers, in place (on their devices), so
// optimizers that hold them stay valid, and a tensor shared under several names is written once, so every name
// still reaches it. Every tensor of module.state_tensors() must be in the file under one of its names (exactly one,
// or several that hold the same bytes, as a file of safetensors.torch.save_file over a state_dict deduplicated by
// hand may); no name of the file may be unknown to the module; shapes and dtypes must match exactly (an I64 or BF16
// tensor in the file is not converted into a float32 parameter). Everything is checked before any parameter is
// written. Errors: a tensor under none of its names; two of its names holding different values (both named); an
// unexpected name; a shape or dtype that differs.
void load(nn::Module& module, const std::string& path);

// The generic layer (checkpoints of model + optimizer state + metadata).
struct TensorFile {
  std::vector<std::pair<std::string, Tensor>> tensors;  // on the CPU, in file data order
  std::map<std::string, std::string> metadata;
};
// Tensors: defined, unique non-empty names other than "__metadata__"; any device.
void save_tensors(const std::vector<std::pair<std::string, Tensor>>& tensors, const std::string& path,
                  const std::map<std::string, std::string>& metadata = {});
// A tensor that save_tensors_streamed writes: what the header says of it, known before any data is written, and the
// function that gives its values (of that dtype and shape, on any device) when the writer reaches it.
struct TensorSource {
  std::string name;
  DType dtype = DType::Float32;
  Shape shape;
  std::function<Tensor()> values;
};
// A metadata value that depends on the data written after the header, such as its checksum (Note [Sealed headers]
// in serialize.cpp): `metadata` gives the file's metadata with `placeholder` (`length` digits) standing once for the
// value somewhere in it, and `value`, called after the last tensor is written, the value itself: that many letters and digits.
struct HeaderSeal {
  size_t length = 0;
  std::function<std::map<std::string, std::string>(std::string_view placeholder)> metadata;
  std::function<std::string()> value;
};
// Writes the file that save_tensors would, the tensors in the order given, asking each source for its values only
// when the writer reaches them and dropping them once written: the file never needs all its tensors in memory at
// once (a sharded optimizer state gathered one bucket at a time). Every source is asked exactly once, in order,
// whether or not the write succeeds: after an error the writer still asks the sources it has not reached (unless a
// source threw), then throws, so sources that are collectives stay in step across processes. Errors as save_tensors',
// and values of another dtype or shape than their source declared.
void save_tensors_streamed(const std::vector<TensorSource>& tensors, const std::string& path, const HeaderSeal& seal);
// Reads a file as described at the top. Errors: the file cannot be opened or read, is not a regular file, shrinks
// while being read, or breaks any rule of the format or the limits above; running out of host memory.
TensorFile load_tensors(const std::string& path);
// The same for the bytes of a file in memory (for fuzzers and tests): the same checks, the same messages with
// "load_tensors_from_bytes: '<source>': " as the prefix. `bytes` is only read during the call.
TensorFile load_tensors_from_bytes(std::string_view bytes, std::string_view source = "<memory>");

}  // namespace tandem
