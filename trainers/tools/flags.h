#pragma once
// tandem-train's command line: the flags, their defaults and their validation.

#include <cstdint>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "tandem/comm/process_group.h"
#include "tandem/core/device.h"
#include "tandem/core/precision.h"
#include "tandem/trainers/csv.h"
#include "tandem/trainers/models.h"
#include "tandem/trainers/trainer.h"

namespace tandem::train_tool {

enum class Optimizer { SGD, Adam, AdamW };
std::string to_string(Optimizer optimizer);  // "sgd", "adam", "adamw"

// --task language-model: a GPT (trainers::make_gpt) trained on a text file by trainers::LanguageModelTrainer.
struct LanguageModelFlags {
  int64_t n_layer = 6;
  int64_t n_head = 6;
  int64_t n_embd = 384;
  int64_t block_size = 256;
  int64_t steps = 5000;
  int64_t eval_every = 500;
  int64_t eval_batches = 200;
  int64_t warmup_steps = 100;
  std::optional<int64_t> lr_decay_steps;  // none: steps (nanoGPT's lr_decay_iters = max_iters)
  double min_lr = 1e-4;
  double grad_clip = 1.0;
  int64_t sample = 0;  // characters generated after training (0: none)
  double temperature = 0.8;
  std::optional<int64_t> top_k = 200;
};

struct Flags {
  std::optional<std::string> data;    // none: the built-in diabetes data
  std::optional<std::string> target;  // none: the last column
  std::vector<std::string> features;  // none: every column but the target
  trainers::Task task = trainers::Task::Regression;
  std::optional<LanguageModelFlags> language_model;  // set by --task language-model (task then unused)
  trainers::CsvOptions csv;                          // the missing-value policy and the delimiter
  bool standardize = true;                           // features and (regression) target standardized
  comm::LaunchInfo launch;                           // how this process was started (a launcher, or none)
  std::vector<Device> devices;                       // this process's devices (trainers::process_devices)
  int64_t timeout_seconds = 0;                       // a collective of the group not done by then ends the job
  int64_t epochs = 0;
  int64_t batch_size = 0;
  int64_t accumulate_steps = 1;  // batches per optimizer step (TrainerOptions::accumulate_steps)
  int zero_stage = 0;            // --zero: TrainerOptions::zero_stage
  Optimizer optimizer = Optimizer::SGD;
  double lr = 0.0;
  double momentum = 0.0;  // SGD only
  double weight_decay = 0.0;
  std::string lr_schedule;  // trainers::parse_lr_schedule's grammar, checked against epochs
  // --model: make_mlp's net (layers, activation, dropout) or make_cnn's (image_shape, dropout), trained on random
  // crops of the images padded by crop_padding, flipped and normalized (an ImageTransforms).
  enum class Model { MLP, CNN } model = Model::MLP;
  Shape image_shape;             // cnn: {C, H, W}
  int64_t crop_padding = 0;      // cnn
  bool horizontal_flip = false;  // cnn: images flipped left to right with probability 1/2 in training
  // cnn: torchvision's Normalize(mean, std) per channel, after the crops and flips in training and on every evaluation
  // (--normalize-mean, --normalize-std: both or neither, one value per channel). Empty: none.
  std::vector<double> normalize_mean, normalize_std;
  std::vector<int64_t> layers;   // hidden widths
  trainers::Activation activation = trainers::Activation::None;
  double dropout = 0.0;                      // after each hidden layer's activation; 0: no Dropout layers
  Precision precision = Precision::Float32;  // of the model's products (TrainerOptions::precision)
  bool capture = true;                       // training steps as CUDA graphs where possible (TrainerOptions::capture)
  uint64_t seed = 0;
  double test_fraction = 0.0;
  std::optional<std::string> checkpoint;
  int64_t checkpoint_every = 1;  // epochs; steps for a language model (default: its eval_every)
  std::optional<std::string> resume;
  std::set<std::string> allow_change;  // "lr", "epochs": what a resume may change
  std::optional<std::string> metrics;
  std::optional<std::string> summary_json;
  std::optional<std::string> plot;
  bool quiet = false;
};

// A bad flag or value: tandem-train prints its message and exits with status 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Parses argv. Returns the flags, or an exit status when the program should stop now: 0 after --help, 2 after a
// bad flag or value (the reason is printed on stderr as one line).
struct ParsedFlags {
  Flags flags;
  std::optional<int> exit_status;
};
ParsedFlags parse_flags(int argc, char** argv);

}  // namespace tandem::train_tool
