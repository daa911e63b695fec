#pragma once
// Saving and loading tensors in the safetensors format (https://github.com/huggingface/safetensors): an 8-byte
// little-endian header length N, N bytes of JSON
//   {"fc1.weight": {"dtype": "F32", "shape": [20, 10], "data_offsets": [0, 800]}, ..., "__metadata__": {...}}
// padded with spaces to a multiple of 8, then the raw little-endian float32 data. A file written by save() opens
// in PyTorch with safetensors.torch.load_file.
//
// Writes go through AtomicFile (tandem/core/atomic_file.h): a reader sees either the old file or the new one, never a
// partial one; a symlinked path stays a link, an existing file keeps its permission bits, and a path that is a
// directory, a device or a FIFO is refused with an Error.

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tandem/core/tensor.h"
#include "tandem/nn/module.h"

namespace tandem {

// Writes module.named_parameters().
void save(const nn::Module& module, const std::string& path);
// Copies the file's tensors into the module's existing parameters, in place (on their devices), so optimizers that
// hold them stay valid. The names must match exactly (no missing, no unexpected ones) and so must the shapes;
// everything is checked before any parameter is written.
void load(nn::Module& module, const std::string& path);

// The generic layer (checkpoints of model + optimizer state + metadata).
struct TensorFile {
  std::vector<std::pair<std::string, Tensor>> tensors;  // on the CPU, in file data order
  std::map<std::string, std::string> metadata;
};
// Tensors: defined, unique non-empty names other than "__metadata__"; any device.
void save_tensors(const std::vector<std::pair<std::string, Tensor>>& tensors, const std::string& path,
                  const std::map<std::string, std::string>& metadata = {});
TensorFile load_tensors(const std::string& path);

}  // namespace tandem
