// Fuzzes TextDataset, the reader of language-model text files: the input is the file. A file that loads is read back
// as both splits and both vocabularies, every window of a small block size batched, and its text re-encoded.
#include <string_view>

#include "fuzz_target.h"
#include "memory_file.h"
#include "tandem/trainers/text_dataset.h"

namespace tandem::fuzz {
namespace {

void read_back(const std::string& path, trainers::TextDatasetOptions options) {
  const trainers::TextDataset data(path, 2, options);
  std::vector<int64_t> windows;
  for (int64_t i = 0; i < data.size(); ++i) windows.push_back(i);
  const trainers::Example batch = data.get_batch(windows);
  data.encode(data.decode(batch.data.reshape({-1}).to_vector_as<int64_t>()));
}

}  // namespace
}  // namespace tandem::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static tandem::fuzz::MemoryFile file("fuzz.txt");
  file.assign(data, size);
  for (const auto vocabulary : {tandem::trainers::TextVocabulary::Characters, tandem::trainers::TextVocabulary::Bytes}) {
    for (const auto split : {tandem::trainers::TextSplit::Train, tandem::trainers::TextSplit::Validation}) {
      tandem::fuzz::run_input([&] { tandem::fuzz::read_back(file.path(), {.split = split, .vocabulary = vocabulary}); });
    }
  }
  return 0;
}
