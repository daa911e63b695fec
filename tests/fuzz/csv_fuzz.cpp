// Fuzzes the CSV reader: the input is the text of a file. A table that parses is turned into a data set twice,
// with the last column as the target and with the first one selected by name.
#include <string_view>

#include "fuzz_target.h"
#include "tandem/trainers/csv.h"
#include "tandem/trainers/table_dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  return tandem::fuzz::run_input([&] {
    const tandem::trainers::CsvTable table = tandem::trainers::parse_csv(text, "fuzz.csv");
    tandem::trainers::make_dataset(table);
    if (!table.columns.empty()) tandem::trainers::make_dataset(table, table.columns.front());
  });
}
