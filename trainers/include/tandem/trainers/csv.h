#pragma once
// Reading numeric CSV tables: a header line of column names, then rows of numbers separated by commas.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::trainers {

// A numeric table read from CSV; values are row-major, rows() * columns.size() of them.
struct CsvTable {
  std::vector<std::string> columns;
  std::vector<double> values;

  int64_t rows() const { return columns.empty() ? 0 : static_cast<int64_t>(values.size() / columns.size()); }
  double at(int64_t row, int64_t column) const { return values[row * columns.size() + column]; }
};

// Parses CSV text. Column names are trimmed of spaces; blank lines are skipped; "\r\n" line ends are accepted.
// Throws Error naming `source` for an empty text, a header without data rows, a duplicate or empty column name,
// a row whose number of cells differs from the header (with its line), or a cell that is not a finite number
// (with its line, column number and column name).
CsvTable parse_csv(std::string_view text, std::string_view source = "<text>");
// Reads and parses a file; throws Error when it cannot be opened.
CsvTable read_csv(const std::string& path);

}  // namespace tandem::trainers
