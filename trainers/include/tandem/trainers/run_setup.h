#pragma once
// The setup a training run belongs to. A checkpoint records these facts, and a resume compares them with its own,
// so that resuming with other data, another model or other hyperparameters is refused with a list of the
// differences instead of silently training something else; the processes of a job compare theirs at the start of
// fit (check_same_setup), so that processes of different setups never train together.

#include <map>
#include <set>
#include <string>
#include <vector>

#include "tandem/comm/process_group.h"
#include "tandem/core/error.h"
#include "tandem/core/fnv1a.h"
#include "tandem/nn/module.h"
#include "tandem/trainers/table_dataset.h"

namespace tandem::trainers {

// Thrown by Trainer::load_checkpoint for a checkpoint of another setup; the message lists the differences.
class SetupMismatch : public Error {
 public:
  using Error::Error;
};

// Fact name -> value, e.g. {"lr": "0.01", "batch_size": "64", "model": "Sequential(0: Linear(...), ...)"}.
using SetupFacts = std::map<std::string, std::string>;

// The module's structure on one line: "Sequential(0: Linear(in_features=10, out_features=20, bias=true), 1: ReLU())".
std::string describe_module(const nn::Module& module);
// A fingerprint of a data set's names and values: "353 rows x 10 features, target y, fnv1a64 3b1f...".
std::string fingerprint(const TableDataset& data);
// A fingerprint of any data set's examples (their data and targets, dtypes, shapes and values, read in batches):
// "1797 examples, fnv1a64 3b1f...".
std::string fingerprint(const Dataset& data);
// A double written so that reading it back gives the same value ("0.01", "0.90000000000000002").
std::string exact_text(double value);
// Adds a tensor to a hash: its dtype's name, its shape and its bytes (copied to the host); an undefined tensor adds
// "undefined". The one rule of fingerprint() and of checkpoints' checksums.
void add_tensor(Fnv1a& hash, const Tensor& tensor);
// A fingerprint of tensors' values (add_tensor of each, in order), "fnv1a64 <16 hex digits>".
std::string fingerprint(const std::vector<Tensor>& tensors);

// Collective over `group`: compares `facts` and `derived` (facts that follow from them, such as fingerprints of the
// data: a different --test-fraction changes the test data too) with every other process's (exchanged as text on the
// host channel) and, when any differs, throws SetupMismatch on every process alike, starting with `caller` and naming
// the first difference (the lowest rank that differs from rank 0, then the first fact by name, of `facts` before
// `derived`) and how many facts differ: "<caller>: the processes' setups differ: lr is 0.01 on rank 0 but 0.02 on
// rank 1 (1 fact differs); every process must run the same setup". Nothing differs for a group of one process.
void check_same_setup(comm::ProcessGroup& group, const SetupFacts& facts, const SetupFacts& derived,
                      const char* caller);

// "name: A in the checkpoint, B now" for every fact whose values differ ("(none)" for a fact on one side only),
// skipping the names in `ignored`.
std::vector<std::string> setup_differences(const SetupFacts& recorded, const SetupFacts& current,
                                           const std::set<std::string>& ignored = {});

}  // namespace tandem::trainers
