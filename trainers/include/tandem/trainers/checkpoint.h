#pragma once
// Training checkpoints: everything needed to continue a run exactly where it stopped. One safetensors file (see
// nn/serialize.h) holding the model's parameters as "model.<name>", the optimizer's state (optim::Optimizer::state(),
// SGD's momentum buffers) as "momentum.<name>" and, in its metadata under "tandem.trainer", a JSON object with the
// counters, the generator and shuffle states, the standardization and the run's setup facts (see run_setup.h).
// Written atomically (a temporary file renamed over the path).

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tandem/core/random.h"
#include "tandem/core/tensor.h"
#include "tandem/trainers/run_setup.h"
#include "tandem/trainers/standardize.h"

namespace tandem::trainers {

struct Checkpoint {
  std::vector<std::pair<std::string, Tensor>> parameters;        // named as model.named_parameters()
  std::vector<std::pair<std::string, Tensor>> momentum_buffers;  // by parameter name; only those that exist
  int64_t epoch = 0;             // epochs completed
  int64_t step = 0;              // optimizer steps completed
  GeneratorState generator;      // tandem::generator_state()
  uint64_t shuffle_state = 0;    // DataLoader::shuffle_state() before the next epoch
  Standardizer standardizer;
  SetupFacts setup;              // Trainer::setup() when it was written
};

void save_checkpoint(const Checkpoint& checkpoint, const std::string& path);
// Throws Error when the file cannot be read or is not a trainer checkpoint. The metadata is validated field by field
// (types, ranges, lengths, no unknown fields); the tensors are checked against a model by Trainer::load_checkpoint.
Checkpoint load_checkpoint(const std::string& path);

}  // namespace tandem::trainers
