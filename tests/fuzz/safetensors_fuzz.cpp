// Fuzzes the safetensors reader: the input is a whole file. It goes through tandem::load_tensors and, when that
// accepts it, through tandem::load into a Linear(3, 2) (whose names and shapes the file must then match).
#include "fuzz_target.h"
#include "memory_file.h"
#include "tandem/nn/linear.h"
#include "tandem/nn/serialize.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static tandem::fuzz::MemoryFile file("safetensors_fuzz");
  static tandem::nn::Linear module(3, 2);
  file.assign(data, size);
  return tandem::fuzz::run_input([&] {
    tandem::load_tensors(file.path());
    tandem::load(module, file.path());
  });
}
