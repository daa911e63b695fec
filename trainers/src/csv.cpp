#include "tandem/trainers/csv.h"

#include <array>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <new>
#include <string>
#include <unordered_map>

#include "io/byte_source.h"
#include "tandem/core/error.h"

namespace tandem::trainers {
namespace {

constexpr size_t kMaxColumns = 1'000'000;
constexpr std::string_view kByteOrderMark = "\xEF\xBB\xBF";
constexpr std::array<std::string_view, 8> kMissingTokens = {"NA", "N/A", "NaN", "nan", "null", "NULL", "None", "?"};

// Spaces and tabs around a field are trimmed, except a tab that is the delimiter.
bool is_blank(char c, char delimiter) { return c == ' ' || (c == '\t' && delimiter != '\t'); }
bool is_line_end(char c) { return c == '\n' || c == '\r'; }

bool is_missing(std::string_view cell) {
  if (cell.empty()) return true;
  for (std::string_view token : kMissingTokens) {
    if (cell == token) return true;
  }
  return false;
}

// Names places in the text for messages: "data.csv line 7, column 3 (bmi)". `columns` holds the header names read
// so far; a column beyond them is named by number only.
class Locator {
 public:
  Locator(const char* caller, std::string_view source, const std::vector<std::string>& columns)
      : caller_(caller), source_(source), columns_(columns) {}

  const char* caller() const { return caller_; }
  std::string_view source() const { return source_; }
  std::string line(int64_t line) const { return std::string(source_) + " line " + std::to_string(line); }
  std::string cell(int64_t line, size_t column) const {
    std::string place = this->line(line) + ", column " + std::to_string(column);
    if (column <= columns_.size()) place += " (" + excerpt(columns_[column - 1]) + ")";
    return place;
  }

 private:
  const char* caller_;
  std::string_view source_;
  const std::vector<std::string>& columns_;
};

// One field as the scanner found it.
struct Field {
  std::string_view text;  // trimmed when unquoted; without its quotes and with "" undone when quoted
  bool quoted = false;
  int64_t line = 0;   // the physical line (1-based) where the field starts
  size_t column = 0;  // 1-based position in its record
  bool ends_record = false;

  bool is_blank_line() const { return column == 1 && ends_record && !quoted && text.empty(); }
};

// Note [CSV scanner states]
// next() reads one field with a small state machine over the bytes of the text (the delimiter is CsvOptions::delimiter,
// a comma by default; "comma" below stands for it):
//   FieldStart     spaces and tabs are skipped; '"' opens a quoted field (-> Quoted); a comma, a line end or the end
//                  of the text gives an empty field; anything else starts an unquoted field (-> Unquoted).
//   Unquoted       runs to the next comma, line end or the end of the text; a '"' is an error.
//   Quoted         runs to the next '"' (-> QuoteInQuoted); commas, CR and LF are data, but line ends still count
//                  as physical lines; the end of the text is an error naming the line where the quote opened.
//   QuoteInQuoted  after a '"' inside quotes: another '"' is an escaped quote (-> Quoted); a comma, line end or
//                  the end of the text ends the field; a space or tab -> AfterQuoted; anything else is an error.
//   AfterQuoted    spaces and tabs up to a comma, line end or the end of the text; anything else is an error.
// A comma ends the field; a line end (LF, CRLF or a lone CR) or the end of the text ends the field and its record.
// Unquoted fields and quoted fields without "" are views into the text (no allocation per cell); the others are
// unescaped into one buffer that the next call reuses.
class Scanner {
 public:
  Scanner(std::string_view text, const Locator& where, char delimiter)
      : text_(text), where_(where), delimiter_(delimiter) {}

  bool done() const { return position_ >= text_.size(); }

  // Reads the next field. At the end of the text (also after a final comma) the field is empty and ends the record.
  Field next() {
    enum class State { FieldStart, Unquoted, Quoted, QuoteInQuoted, AfterQuoted };
    Field field{{}, false, line_, column_, false};
    State state = State::FieldStart;
    size_t begin = position_;  // of the field's text
    size_t end = position_;    // one past its last byte that is not a trailing space or tab
    bool escapes = false;
    for (; position_ < text_.size(); ++position_) {
      const char c = text_[position_];
      if (c == delimiter_ || is_line_end(c)) {
        if (state == State::Quoted) {
          if (c == '\n' || (c == '\r' && !next_is('\n'))) ++line_;
          continue;
        }
        return finish(field, begin, end, escapes, c == delimiter_ ? 1 : consume_line_end());
      }
      switch (state) {
        case State::FieldStart:
          if (is_blank(c, delimiter_)) {
            begin = end = position_ + 1;
          } else if (c == '"') {
            field.quoted = true;
            begin = position_ + 1;
            state = State::Quoted;
          } else {
            end = position_ + 1;
            state = State::Unquoted;
          }
          break;
        case State::Unquoted:
          if (!is_blank(c, delimiter_)) end = position_ + 1;
          TANDEM_CHECK(c != '"', where_.caller(), ": ", where_.cell(field.line, field.column),
                       ": a quote inside the unquoted field \"", excerpt(rest_of_field(begin)),
                       "\" (quote the whole field)");
          break;
        case State::Quoted:
          if (c == '"') {
            end = position_;
            state = State::QuoteInQuoted;
          }
          break;
        case State::QuoteInQuoted:
          if (c == '"') {
            escapes = true;
            state = State::Quoted;
            break;
          }
          [[fallthrough]];
        case State::AfterQuoted:
          TANDEM_CHECK(is_blank(c, delimiter_), where_.caller(), ": ", where_.cell(field.line, field.column),
                       ": text \"", excerpt(rest_of_field(position_)), "\" after the closing quote of a quoted field");
          state = State::AfterQuoted;
          break;
      }
    }
    TANDEM_CHECK(state != State::Quoted, where_.caller(), ": ", where_.cell(field.line, field.column),
                 ": the quote that opens this field is not closed before the end of the text");
    return finish(field, begin, end, escapes, 0);
  }

 private:
  bool next_is(char c) const { return position_ + 1 < text_.size() && text_[position_ + 1] == c; }

  // The text from `begin` to the next comma, line end or the end of the text.
  std::string_view rest_of_field(size_t begin) const {
    const char ends[] = {delimiter_, '\r', '\n', '\0'};
    return text_.substr(begin, text_.find_first_of(ends, begin) - begin);
  }

  // Counts the line end (CR, LF or CRLF) at position_ and returns its length.
  size_t consume_line_end() {
    ++line_;
    return text_[position_] == '\r' && next_is('\n') ? 2 : 1;
  }

  // Completes `field` with the text [begin, end), steps past `separator` bytes (0 at the end of the text, which
  // also ends the record) and moves to the next column or record.
  Field finish(Field field, size_t begin, size_t end, bool escapes, size_t separator) {
    field.text = text_.substr(begin, end - begin);
    if (escapes) field.text = unescape(field.text);
    field.ends_record = separator == 0 || text_[position_] != delimiter_;
    position_ += separator;
    column_ = field.ends_record ? 1 : column_ + 1;
    return field;
  }

  // Replaces each "" by ".
  std::string_view unescape(std::string_view text) {
    buffer_.clear();
    for (size_t i = 0; i < text.size(); ++i) {
      buffer_ += text[i];
      if (text[i] == '"') ++i;
    }
    return buffer_;
  }

  std::string_view text_;
  const Locator& where_;
  const char delimiter_;
  size_t position_ = 0;
  int64_t line_ = 1;
  size_t column_ = 1;
  std::string buffer_;
};

// Whether `cell` holds a finite number; if so, stores it in `value`.
bool parse_number(std::string_view cell, double& value) {
  const char* first = cell.data();
  const char* last = cell.data() + cell.size();
  if (first != last && *first == '+') ++first;  // from_chars rejects a leading '+'
  auto [end, error] = std::from_chars(first, last, value);
  return error == std::errc() && end == last && std::isfinite(value);
}

// Reads the header record (skipping blank lines before it) into table.columns.
void read_header(Scanner& scanner, const Locator& where, CsvTable& table) {
  Field field;
  do {
    TANDEM_CHECK(!scanner.done(), where.caller(), ": ", where.source(),
                 " is empty but expected a header line and data rows");
    field = scanner.next();
  } while (field.is_blank_line());

  std::unordered_map<std::string, size_t> seen;
  while (true) {
    TANDEM_CHECK(field.column <= kMaxColumns, where.caller(), ": ", where.line(field.line),
                 ": the header has more than ", kMaxColumns, " columns");
    TANDEM_CHECK(!field.text.empty(), where.caller(), ": ", where.line(field.line), ": column ", field.column,
                 " of the header has no name");
    auto [previous, inserted] = seen.emplace(field.text, field.column);
    TANDEM_CHECK(inserted, where.caller(), ": ", where.line(field.line), ": column name \"", excerpt(field.text),
                 "\" appears twice in the header (columns ", previous->second, " and ", field.column, ")");
    table.header.emplace_back(field.text);
    if (field.ends_record) return;
    field = scanner.next();
  }
}

// The header's columns that options.keep_column keeps, and table.columns made of their names.
std::vector<char> kept_columns(const Locator& where, const CsvOptions& options, CsvTable& table) {
  std::vector<char> keep(table.header.size(), 1);
  for (size_t c = 0; c < table.header.size(); ++c) {
    if (options.keep_column) keep[c] = options.keep_column(table.header[c], c, table.header.size()) ? 1 : 0;
    if (keep[c]) table.columns.push_back(table.header[c]);
  }
  TANDEM_CHECK(!table.columns.empty(), where.caller(), ": ", where.source(), ": keep_column keeps none of its ",
               table.header.size(), " columns");
  return keep;
}

// Reads the data records after the header, converting each kept cell as it is scanned.
void read_rows(Scanner& scanner, const Locator& where, const CsvOptions& options, const std::vector<char>& keep,
               CsvTable& table) {
  const size_t width = table.header.size();
  while (!scanner.done()) {
    Field field = scanner.next();
    if (field.is_blank_line()) continue;
    const int64_t line = field.line;
    const size_t row_begin = table.values.size();
    bool has_missing = false;
    while (true) {
      TANDEM_CHECK(field.column <= width, where.caller(), ": ", where.line(line), " has at least ", field.column,
                   " cells but the header has ", width, " columns");
      double value = 0.0;
      if (!keep[field.column - 1]) {
        // skipped unread
      } else if (parse_number(field.text, value)) {
        table.values.push_back(value);
      } else {
        TANDEM_CHECK(is_missing(field.text), where.caller(), ": ", where.cell(field.line, field.column), ": \"",
                     excerpt(field.text), "\" is not a finite number");
        TANDEM_CHECK(
            options.missing == MissingValues::DropRow, where.caller(), ": ", where.cell(field.line, field.column),
            ": missing value \"", field.text,
            "\"; expected a number (to skip such rows: MissingValues::DropRow, or tandem-train --missing drop-row)");
        has_missing = true;
      }
      if (field.ends_record) break;
      field = scanner.next();
    }
    TANDEM_CHECK(field.column == width, where.caller(), ": ", where.line(line), " has ", field.column,
                 " cells but the header has ", width, " columns");
    if (has_missing) {
      table.values.resize(row_begin);
      ++table.dropped_rows;
    }
  }
}

CsvTable parse(std::string_view text, std::string_view source, const CsvOptions& options, const char* caller) {
  if (text.starts_with(kByteOrderMark)) text.remove_prefix(kByteOrderMark.size());
  const char d = options.delimiter;
  TANDEM_CHECK(d != '"' && d != '\r' && d != '\n' && d != ' ' && d != '\0', caller, ": the delimiter ",
               excerpt(std::string_view(&d, 1)), " cannot separate fields (a quote, a line end, a space or NUL)");
  CsvTable table;
  const Locator where(caller, source, table.header);
  Scanner scanner(text, where, d);
  read_header(scanner, where, table);
  const std::vector<char> keep = kept_columns(where, options, table);
  read_rows(scanner, where, options, keep, table);
  TANDEM_CHECK(table.rows() > 0 || table.dropped_rows > 0, caller, ": ", source, " has a header but no data rows");
  TANDEM_CHECK(table.rows() > 0, caller, ": ", source, " has no data rows left: all ", table.dropped_rows,
               " rows have a missing value (dropped by MissingValues::DropRow)");
  return table;
}

// Reads the whole file; only regular files are opened (see Note [Opening untrusted paths] in io/byte_source.cpp).
std::string read_regular_file(const std::string& path) {
  FileByteSource file(path, "read_csv: '" + path + "': ");
  std::string contents(file.size(), '\0');
  file.read(0, contents.data(), contents.size());
  return contents;
}

}  // namespace

CsvTable parse_csv(std::string_view text, std::string_view source) { return parse_csv(text, source, CsvOptions{}); }

CsvTable parse_csv(std::string_view text, std::string_view source, const CsvOptions& options) {
  return parse(text, source, options, "parse_csv");
}

CsvTable read_csv(const std::string& path) { return read_csv(path, CsvOptions{}); }

CsvTable read_csv(const std::string& path, const CsvOptions& options) {
  try {
    return parse(read_regular_file(path), path, options, "read_csv");
  } catch (const std::bad_alloc&) {
    std::error_code error;
    const uintmax_t bytes = std::filesystem::file_size(path, error);
    TANDEM_FAIL("read_csv: '", path, "'", error ? "" : " (" + std::to_string(bytes) + " bytes)",
                ": out of memory while reading it (its text and the parsed values take about three times the file's "
                "size); read a smaller part, or on a machine with more memory");
  }
}

}  // namespace tandem::trainers
