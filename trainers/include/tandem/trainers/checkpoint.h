#pragma once
// Training checkpoints: everything needed to continue a run exactly where it stopped, in one safetensors file (see
// nn/serialize.h), written atomically (a temporary file renamed over the path).
//
// Version 6 (what save_checkpoint writes): version 4's contents, and in the trainer metadata the checksum of the
// data (Note [Checkpoint checksums] in checkpoint.cpp), which a resume verifies before it applies anything; written
// as the tensors stream past, so that a sharded optimizer state is never gathered whole.
// Version 5 (still read): the same with a checksum that hashes the tensors in name order.
// Version 4 (still read):
//   - "model.<name>": the model's state_dict(), its parameters and its buffers (BatchNorm's running statistics),
//     each distinct tensor once: a shared one under its first name (Note [Shared parameters] in nn/module.h);
//   - the optimizer's state by name, as optim::write_optimizer_state embeds it: tensors "optimizer.<index>.<slot>"
//     and the metadata entry "tandem.optimizer" (any optimizer: SGD's momentum, Adam's moments and step counts);
//   - under the metadata key "tandem.trainer", a JSON object with the counters, the generator and shuffle states,
//     the standardization and the run's setup facts (see run_setup.h).
// A LanguageModelTrainer's checkpoint (versions 5 and 6) holds, in place of the standardization, "language_model": the
// positions of its two window streams and its evaluations so far (language_model_progress.h); its epoch and shuffle
// state are 0.
// Version 3 (still read): "model.<name>" for the parameters only (no buffers), SGD's momentum buffers (or a custom
// optimizer's Optimizer::state()) as "momentum.<name>", no optimizer metadata, and the same trainer metadata.
//
// Note [Schedule position]: an LR schedule needs no state of its own in a checkpoint. The Trainer's schedules
// (lr_schedule.h) are optim::LRScheduler closed forms of the epoch over the optimizer's initial lrs, which the
// resumed Trainer's options give again (the setup facts "lr" and "lr_schedule" must match), and fit() moves them to
// the current epoch (set_last_epoch) before every epoch: the epoch counter is the schedule's position.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tandem/core/random.h"
#include "tandem/core/tensor.h"
#include "tandem/optim/optimizer_state.h"
#include "tandem/trainers/language_model_progress.h"
#include "tandem/trainers/run_setup.h"
#include "tandem/trainers/standardize.h"

namespace tandem::trainers {

inline constexpr int64_t kCheckpointVersion = 6;

struct Checkpoint {
  int64_t version = kCheckpointVersion;  // of the file read; save_checkpoint writes kCheckpointVersion only
  // Version 4: named as model.state_dict() (parameters and buffers), a shared tensor once, under the name of
  // named_parameters() or named_buffers(); version 3: as model.named_parameters().
  std::vector<std::pair<std::string, Tensor>> model_state;
  optim::OptimizerState optimizer;  // version 4: Optimizer::state_dict()
  // Version 3 only: Optimizer::state() by parameter name, only the tensors that exist.
  std::vector<std::pair<std::string, Tensor>> momentum_buffers;
  int64_t epoch = 0;                                    // epochs completed
  int64_t step = 0;                                     // optimizer steps completed
  GeneratorState generator;                             // tandem::generator_state()
  uint64_t shuffle_state = 0;                           // DataLoader::shuffle_state() before the next epoch
  Standardizer standardizer;                            // a Trainer's (empty in a language model's)
  std::optional<LanguageModelProgress> language_model;  // a LanguageModelTrainer's
  SetupFacts setup;                                     // Trainer::setup() when it was written
  // Versions 5 and 6, as load_checkpoint read them: the checksum the file recorded when it was written, and the
  // checksum of the data it holds now; they differ for a file damaged since (save_checkpoint computes its own).
  std::string recorded_checksum;
  std::string checksum;
};

// Writes `checkpoint` as version 6 (with the checksum of its data). Errors: a checkpoint of another version or with
// momentum_buffers (version 3's form, which is read but never written); write_optimizer_state's and save_tensors'
// errors.
void save_checkpoint(const Checkpoint& checkpoint, const std::string& path);
// The same with the optimizer state of `optimizer` in place of checkpoint.optimizer (left empty): its tensors are
// asked for one at a time and written as they come (a sharded run's, parallel::stream_optimizer_state). Every source
// is asked once, in order, also when the write fails (nn::save_tensors_streamed), so gathers stay in step.
void save_checkpoint(const Checkpoint& checkpoint, const optim::StreamedOptimizerState& optimizer,
                     const std::string& path);
// Throws Error when the file cannot be read or is not a trainer checkpoint of version 3 to 6. The metadata (the
// trainer's and the optimizer's) is validated field by field (types, ranges, lengths, no unknown fields) and every
// tensor name must belong to the version's layout; the tensors are checked against a model and an optimizer by
// Trainer::load_checkpoint.
Checkpoint load_checkpoint(const std::string& path);
// The checksum a checkpoint of `version` (5 or 6) records of its data, computed for `file` (Note [Checkpoint
// checksums] in checkpoint.cpp): for tools that edit a checkpoint on purpose and must record the checksum of what
// they wrote.
std::string checkpoint_checksum(const TensorFile& file, int64_t version = kCheckpointVersion);

}  // namespace tandem::trainers
