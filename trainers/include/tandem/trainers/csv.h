#pragma once
// Reading numeric CSV tables (RFC 4180): a header record of column names, then records of numbers.

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::trainers {

// A numeric table read from CSV; values are row-major, rows() * columns.size() of them.
struct CsvTable {
  std::vector<std::string> columns;  // the columns read (CsvOptions::keep_column), in the file's order
  std::vector<double> values;
  int64_t dropped_rows = 0;         // rows skipped for a missing value under MissingValues::DropRow
  std::vector<std::string> header;  // every column name of the file's header, the skipped ones too

  int64_t rows() const { return columns.empty() ? 0 : static_cast<int64_t>(values.size() / columns.size()); }
  double at(int64_t row, int64_t column) const { return values[row * columns.size() + column]; }
};

// What to do with a missing cell: one that is empty or one of NA, N/A, NaN, nan, null, NULL, None, ? (exactly).
enum class MissingValues {
  Error,    // throw Error naming the line, column and column name
  DropRow,  // skip every row with a missing cell and count it in CsvTable::dropped_rows
};

struct CsvOptions {
  MissingValues missing = MissingValues::Error;
  // The character between fields: ',' by default; ';', '\t' (TSV), '|' and other single bytes except a quote, CR,
  // LF and space. With '\t' a tab separates fields and only spaces are trimmed.
  char delimiter = ',';
  // Which columns to read, asked once per header column (its name, 0-based index and the header's column count):
  // the others are skipped unread (text, or missing cells, in them are no error and drop no row). Empty: every
  // column. Errors: keeping none.
  std::function<bool(const std::string& name, size_t index, size_t count)> keep_column;
};

// Parses CSV text.
// Format: fields are separated by commas (CsvOptions::delimiter) and may be enclosed in double quotes; inside quotes
// "" is a literal quote and delimiters, CR and LF are data. Records end at LF, CRLF or a lone CR; the last one needs no
// line end. Blank lines are skipped, and so is a leading UTF-8 byte-order mark. Unquoted fields are trimmed of spaces
// and tabs; quoted fields keep their inner spaces, and spaces or tabs around the quotes are ignored. The first record
// holds the column names (at most 1,000,000); every other record holds one finite number per column read (keep_column).
// Throws Error naming `source` and the physical line where the offending record or field starts (columns 1-based)
// for: an empty text; a header without data rows (or with none left after dropping); an empty or repeated column
// name; a quote inside an unquoted field; text after a closing quote; a quote that is never closed; a row with more
// or fewer cells than the header (more: as soon as the extra cell is seen); a missing cell under
// MissingValues::Error; any other cell that is not a finite number. Messages quote at most 60 characters of a cell
// or name (tandem::excerpt).
CsvTable parse_csv(std::string_view text, std::string_view source = "<text>");
CsvTable parse_csv(std::string_view text, std::string_view source, const CsvOptions& options);

// Reads a regular file and parses it as parse_csv does, naming `path` as the source. Never blocks on a FIFO or
// device: throws Error naming the path when it cannot be opened or read, or is a directory, FIFO, device or socket.
CsvTable read_csv(const std::string& path);
CsvTable read_csv(const std::string& path, const CsvOptions& options);

}  // namespace tandem::trainers
