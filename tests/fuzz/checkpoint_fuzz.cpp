// Fuzzes trainer checkpoints, in three modes chosen by the first byte of the input:
//   - any byte but 0x00 and 0x03: the whole input is the trainer metadata (the JSON text under "tandem.trainer"). It
//     is saved with tandem::save_tensors next to a valid version 4 body for the trainer's model ("model.*" tensors
//     and an SGD optimizer state: "optimizer.*" tensors and "tandem.optimizer" metadata), so every input reaches the
//     metadata checks instead of dying in the tensor part;
//   - 0x03: the same with the rest of the input as the metadata and a version 3 body ("model.*" and "momentum.*");
//   - 0x00: the rest of the input is the whole checkpoint file, tensors included.
// Either way the checkpoint is loaded into one Trainer (make_mlp(10, 20) on cpu:0) with Trainer::load_checkpoint and,
// when it loads, used as a resumed run uses it: predict() on a few rows, then fit() up to epoch 2.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fuzz_target.h"
#include "memory_file.h"
#include "tandem/core/random.h"
#include "tandem/nn/serialize.h"
#include "tandem/optim/optimizer_state.h"
#include "tandem/trainers/models.h"
#include "tandem/trainers/trainer.h"

namespace tandem::fuzz {
namespace {

using trainers::TableDataset;
using trainers::Trainer;

constexpr uint8_t kWholeFileMode = 0x00;
constexpr uint8_t kVersion3MetadataMode = 0x03;
constexpr const char* kTrainerMetadataKey = "tandem.trainer";
constexpr int64_t kFeatures = 10;
constexpr int64_t kHidden = 20;

std::shared_ptr<nn::Module> seeded_model() {
  manual_seed(0);
  return trainers::make_mlp(kFeatures, kHidden);
}

// The tensors (and the optimizer metadata) of the trainer's checkpoints of `version` (3 or 4), copied so that
// training does not change them: the model's parameters and a zero momentum buffer for each.
TensorFile checkpoint_body(const nn::Module& model, int version) {
  TensorFile body;
  const auto parameters = model.named_parameters();
  for (const auto& [name, parameter] : parameters) {
    body.tensors.emplace_back("model." + name, Tensor::from_vector(parameter.to_vector(), parameter.shape()));
  }
  optim::OptimizerState sgd{.kind = "optim::SGD", .version = 1, .parameters = {}};
  for (const auto& [name, parameter] : parameters) {
    if (version == 3) body.tensors.emplace_back("momentum." + name, Tensor::zeros(parameter.shape()));
    sgd.parameters.push_back({.step = 0, .tensors = {{"momentum_buffer", Tensor::zeros(parameter.shape())}}});
  }
  if (version == 4) optim::write_optimizer_state(sgd, body);
  return body;
}

// The first rows of the diabetes data: what predict() and fit() run on after a checkpoint loads.
TableDataset probe_rows() {
  TableDataset data;
  data.feature_names = {"age", "sex", "bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6"};
  data.target_name = "target";
  data.features = {59, 2, 32.1, 101.0, 157, 93.2,  38.0, 4.0, 4.8598, 87,  //
                   48, 1, 21.6, 87.0,  183, 103.2, 70.0, 3.0, 3.8918, 69,  //
                   72, 2, 30.5, 93.0,  156, 93.6,  41.0, 4.0, 4.6728, 85};
  data.targets = {151, 75, 141};
  return data;
}

// save_tensors writes through a temporary file renamed over the path, so the metadata mode needs a real directory:
// /dev/shm (memory) where there is one.
std::string scratch_path() {
  const std::filesystem::path directory = std::filesystem::is_directory("/dev/shm")
                                              ? std::filesystem::path("/dev/shm")
                                              : std::filesystem::temp_directory_path();
  return (directory / ("tandem_checkpoint_fuzz." + std::to_string(::getpid()) + ".safetensors")).string();
}

class CheckpointHarness {
 public:
  CheckpointHarness()
      : trainer_(seeded_model(), {.devices = {Device::cpu(0)}, .epochs = 2}),
        version4_(checkpoint_body(*trainer_.model(), 4)),
        version3_(checkpoint_body(*trainer_.model(), 3)),
        probe_(probe_rows()),
        scratch_path_(scratch_path()),
        whole_file_("checkpoint_fuzz") {}

  void run(const uint8_t* data, size_t size) {
    if (size > 0 && data[0] == kWholeFileMode) {
      whole_file_.assign(data + 1, size - 1);
      resume_from(whole_file_.path());
      return;
    }
    const bool version3 = size > 0 && data[0] == kVersion3MetadataMode;
    const size_t skipped = version3 ? 1 : 0;
    TensorFile file = version3 ? version3_ : version4_;
    file.metadata[kTrainerMetadataKey] = std::string(reinterpret_cast<const char*>(data) + skipped, size - skipped);
    save_tensors(file.tensors, scratch_path_, file.metadata);
    // The file is unlinked before it is loaded (through its descriptor), so an input that crashes the process
    // leaves nothing behind.
    const int fd = ::open(scratch_path_.c_str(), O_RDONLY | O_CLOEXEC);
    ::unlink(scratch_path_.c_str());
    if (fd < 0) {
      std::perror("checkpoint_fuzz: cannot reopen the saved checkpoint");
      std::abort();
    }
    struct CloseOnExit {
      int fd;
      ~CloseOnExit() { ::close(fd); }
    } close_on_exit{fd};
    resume_from("/proc/self/fd/" + std::to_string(fd));
  }

 private:
  void resume_from(const std::string& path) {
    trainer_.load_checkpoint(path);
    trainer_.predict(probe_);
    trainer_.fit(probe_);
  }

  Trainer trainer_;
  TensorFile version4_;
  TensorFile version3_;
  TableDataset probe_;
  std::string scratch_path_;
  MemoryFile whole_file_;
};

}  // namespace
}  // namespace tandem::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static tandem::fuzz::CheckpointHarness harness;
  return tandem::fuzz::run_input([&] { harness.run(data, size); });
}
