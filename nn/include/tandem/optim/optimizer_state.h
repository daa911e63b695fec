#pragma once
// optim::OptimizerState: what an optimizer has accumulated (step counts, moment buffers), by parameter and by name,
// as Optimizer::state_dict() returns it and load_state_dict() takes it back; and its safetensors form, on its own
// (save/load_optimizer_state) or inside a larger tensor file such as a checkpoint (write/read_optimizer_state).
//
// The file form: each tensor named "optimizer.<parameter index>.<slot>" (e.g. "optimizer.3.exp_avg") and, under
// the metadata key "tandem.optimizer", a JSON object
//   {"format": "tandem-optimizer-state", "kind": "optim::Adam", "version": 1, "steps": [12, 12, 0]}
// with one step count per parameter. Step counts are integers in the metadata rather than float32 tensors, so
// they stay exact however long a run is.

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tandem/core/tensor.h"
#include "tandem/nn/serialize.h"

namespace tandem::optim {

// The largest step count a state may hold: 2^53, which a float64 still counts exactly; far below int64's end, so
// that a loaded count goes on being incremented (and multiplied into the update's factors) without overflowing.
inline constexpr int64_t kMaxSteps = int64_t{1} << 53;

struct ParameterState {
  int64_t step = 0;  // updates applied to the parameter; 0 for optimizers that do not count them
  // Named buffers of the parameter's shape ("exp_avg", "momentum_buffer", ...); none before its first update.
  std::vector<std::pair<std::string, Tensor>> tensors;
};

struct OptimizerState {
  std::string kind;                        // the optimizer that wrote it, as its errors name it: "optim::Adam"
  int64_t version = 1;                     // of that optimizer's layout: load_state_dict refuses other versions
  std::vector<ParameterState> parameters;  // one per parameter, in Optimizer::parameters() order
};

// Adds `state` to `file` as described at the top. Errors: a negative step, an undefined tensor, an empty or
// repeated slot name, or a file that already holds an optimizer state.
void write_optimizer_state(const OptimizerState& state, TensorFile& file);
// An optimizer state in its file form, its tensors given one at a time (a sharded state gathered bucket by bucket,
// for nn::save_tensors_streamed): the step counts up front, then each slot's tensor as a source named
// optimizer_tensor_name(parameter, slot).
struct StreamedSlot {
  size_t parameter = 0;
  std::string slot;  // "exp_avg", "momentum_buffer", ...
  TensorSource tensor;
};
struct StreamedOptimizerState {
  std::string kind;
  int64_t version = 1;
  std::vector<int64_t> steps;       // one per parameter
  std::vector<StreamedSlot> slots;  // in the order their sources must be asked
};
// "optimizer.<parameter>.<slot>", the name of a slot's tensor in the file form.
std::string optimizer_tensor_name(size_t parameter, const std::string& slot);
// `state` as sources over the tensors it holds. Errors as write_optimizer_state's.
StreamedOptimizerState streamed(const OptimizerState& state);
// Asks every source of `state` once, in order, dropping the values: what a process that writes nothing does to keep in
// step with the one that writes, when the sources are collectives.
void drain(const StreamedOptimizerState& state);
// Adds the metadata entry "tandem.optimizer" of `state`. Error: `metadata` already has one.
void add_optimizer_metadata(const StreamedOptimizerState& state, std::map<std::string, std::string>& metadata);

// Takes the optimizer state out of `file` (removes its tensors and metadata entry) and returns it, tensors on the
// CPU. Treats the file as hostile: the metadata must be exactly the object above (at most 1,000,000 parameters,
// kind at most 200 characters, integers in range), every "optimizer." tensor name must be
// "optimizer.<index>.<slot>" with a canonical decimal index below the parameter count. Errors start with `source`.
// Whether the state fits an optimizer is for its load_state_dict to check.
OptimizerState read_optimizer_state(TensorFile& file, const std::string& source);

// A file holding one optimizer state and nothing else (written atomically, see serialize.h).
void save_optimizer_state(const OptimizerState& state, const std::string& path);
OptimizerState load_optimizer_state(const std::string& path);

}  // namespace tandem::optim
