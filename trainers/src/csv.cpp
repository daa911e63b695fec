#include "tandem/trainers/csv.h"

#include <charconv>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "tandem/core/error.h"

namespace tandem::trainers {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split_cells(std::string_view line) {
  std::vector<std::string_view> cells;
  size_t start = 0;
  while (true) {
    size_t comma = line.find(',', start);
    cells.push_back(trim(line.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start)));
    if (comma == std::string_view::npos) return cells;
    start = comma + 1;
  }
}

// Walks the text line by line, keeping the 1-based line number for messages and skipping blank lines.
class LineReader {
 public:
  explicit LineReader(std::string_view text) : text_(text) {}
  bool next(std::string_view& line) {
    while (position_ < text_.size()) {
      size_t end = text_.find('\n', position_);
      if (end == std::string_view::npos) end = text_.size();
      line = trim(text_.substr(position_, end - position_));
      position_ = end + 1;
      ++number_;
      if (!line.empty()) return true;
    }
    return false;
  }
  int64_t number() const { return number_; }

 private:
  std::string_view text_;
  size_t position_ = 0;
  int64_t number_ = 0;
};

double parse_cell(std::string_view cell, const char* caller, std::string_view source, int64_t line, size_t column,
                  const std::string& name) {
  double value = 0.0;
  const char* first = cell.data();
  const char* last = cell.data() + cell.size();
  if (!cell.empty() && *first == '+') ++first;  // from_chars rejects a leading '+'
  auto [end, error] = std::from_chars(first, last, value);
  TANDEM_CHECK(!cell.empty() && error == std::errc() && end == last && std::isfinite(value), caller, ": ", source,
               " line ", line, ", column ", column, " (", name, "): \"", cell, "\" is not a finite number");
  return value;
}

CsvTable parse(std::string_view text, std::string_view source, const char* caller) {
  LineReader reader(text);
  std::string_view line;
  TANDEM_CHECK(reader.next(line), caller, ": ", source, " is empty but expected a header line and data rows");

  CsvTable table;
  std::set<std::string> seen;
  for (std::string_view cell : split_cells(line)) {
    TANDEM_CHECK(!cell.empty(), caller, ": ", source, " line ", reader.number(), ": column ",
                 table.columns.size() + 1, " of the header has no name");
    TANDEM_CHECK(seen.insert(std::string(cell)).second, caller, ": ", source, " line ", reader.number(),
                 ": column name \"", cell, "\" appears twice in the header");
    table.columns.emplace_back(cell);
  }

  while (reader.next(line)) {
    std::vector<std::string_view> cells = split_cells(line);
    TANDEM_CHECK(cells.size() == table.columns.size(), caller, ": ", source, " line ", reader.number(), " has ",
                 cells.size(), " cells but the header has ", table.columns.size(), " columns");
    for (size_t c = 0; c < cells.size(); ++c) {
      table.values.push_back(parse_cell(cells[c], caller, source, reader.number(), c + 1, table.columns[c]));
    }
  }
  TANDEM_CHECK(!table.values.empty(), caller, ": ", source, " has a header but no data rows");
  return table;
}

}  // namespace

CsvTable parse_csv(std::string_view text, std::string_view source) { return parse(text, source, "parse_csv"); }

CsvTable read_csv(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  TANDEM_CHECK(file.is_open(), "read_csv: cannot open \"", path, "\"");
  std::ostringstream contents;
  contents << file.rdbuf();
  TANDEM_CHECK(!file.bad(), "read_csv: error while reading \"", path, "\"");
  return parse(contents.str(), path, "read_csv");
}

}  // namespace tandem::trainers
