#pragma once
// The checks a resume makes of a checkpoint's tensors and optimizer state before it writes anything (Note
// [All-or-nothing resume] in trainer_checkpoint.cpp), shared by Trainer::load_checkpoint and
// LanguageModelTrainer::load_checkpoint. Every message starts with `caller` ("Trainer::load_checkpoint").

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tandem/core/tensor.h"
#include "tandem/nn/module.h"
#include "tandem/optim/optimizer_state.h"
#include "tandem/parallel/replicated_optimizer.h"
#include "tandem/trainers/checkpoint.h"

namespace tandem::trainers::checkpoint_restore {

// A tensor the model expects in a checkpoint: a parameter, a buffer or (version 3) a parameter's momentum buffer.
struct Expected {
  std::string name;
  Tensor tensor;  // the model's: the shape and dtype the checkpoint's must have
  const char* kind;
};

std::vector<Expected> expected(const std::vector<std::pair<std::string, Tensor>>& named, const char* kind);
// The model's parameters, then its buffers.
std::vector<Expected> model_tensors(const nn::Module& model);

// Throws unless every element of `tensor` is finite (integer tensors always are), naming the first that is not.
void check_finite(const char* caller, const Tensor& tensor, const std::string& what, const std::string& path);
// Every value of the optimizer state finite, each named by its parameter.
void check_finite(const char* caller, const optim::OptimizerState& state,
                  const std::vector<std::pair<std::string, Tensor>>& parameters, const std::string& path);

// The checkpoint's tensors in the order of `slots`, checked by name, shape, dtype and (with check_values) finite
// values; entries stay undefined for names the checkpoint does not hold. `stored_kind` names the checkpoint's tensors
// in messages.
std::vector<Tensor> matched(const char* caller, const std::vector<Expected>& slots,
                            const std::vector<std::pair<std::string, Tensor>>& stored, const char* stored_kind,
                            const std::string& path, bool check_values);
// matched(), and every slot found.
std::vector<Tensor> matched_all(const char* caller, const std::vector<Expected>& slots,
                                const std::vector<std::pair<std::string, Tensor>>& stored, const std::string& path,
                                bool check_values);

// The optimizer state of a run follows its step count: every step updates every trainable parameter, so Adam's and
// AdamW's counts equal the run's step (0 for frozen parameters), and SGD has a momentum buffer either for every
// trainable parameter or, before its first step, for none.
void check_state_follows_the_steps(const char* caller, const optim::OptimizerState& state,
                                   const std::string& optimizer_kind, int64_t step,
                                   const std::vector<std::pair<std::string, Tensor>>& parameters,
                                   const std::string& path);

// The checksum the file recorded equals its data's (Note [Checkpoint checksums] in checkpoint.cpp).
void check_undamaged(const char* caller, const Checkpoint& checkpoint, const std::string& path);

// The last check and the first write: `load` (the optimizer's load_state_dict or set_state, which check the whole
// state before they write) with an Error of the state reworded to name the file.
template <typename Load>
void load_optimizer_state(const char* caller, const std::string& path, Load&& load) {
  try {
    load();
  } catch (const InternalError&) {
    throw;
  } catch (const Error& e) {
    TANDEM_FAIL(caller, ": '", path, "' holds an optimizer state that does not fit the optimizer: ", e.what());
  }
}

// Throws SetupMismatch unless `recorded` (the checkpoint's facts) and `current` agree but for the facts `ignored`:
// "<caller>: '<path>' belongs to another setup: <the differences> (<advice>)".
void refuse_other_setup(const char* caller, const std::string& path, const SetupFacts& recorded,
                      const SetupFacts& current, const std::set<std::string>& ignored, const std::string& advice);

// The model's state_dict() tensors, each once under the name named_parameters() or named_buffers() gives it, which
// a resume looks for (Note [Shared parameters] in nn/module.h): a checkpoint's model_state.
std::vector<std::pair<std::string, Tensor>> model_state(const nn::Module& model);

// Copies `values` into the slots' tensors (no autograd).
void write(const std::vector<Expected>& slots, const std::vector<Tensor>& values);

}  // namespace tandem::trainers::checkpoint_restore
