#include <fcntl.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>

#include "support/test_support.h"

namespace tandem::trainers {
namespace {

// The message of the Error that `parse` throws, or "" when it throws none.
template <typename Parse>
std::string error_message(Parse parse) {
  try {
    parse();
  } catch (const Error& e) {
    return testing::without_error_location(e.what());
  }
  return "";
}

const CsvOptions kDropRows{MissingValues::DropRow};

TEST(Csv, ParsesHeaderAndNumbers) {
  CsvTable table = parse_csv(" a , b,c\n1,2.5,-3\r\n\n+4, 5e-1 ,6\n");
  EXPECT_EQ(table.columns, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(table.rows(), 2);
  EXPECT_EQ(table.values, (std::vector<double>{1, 2.5, -3, 4, 0.5, 6}));
  EXPECT_EQ(table.at(1, 2), 6.0);
  EXPECT_EQ(table.dropped_rows, 0);
}

TEST(Csv, EmptyTextIsAnError) {
  EXPECT_ERROR(parse_csv("", "data.csv"), "parse_csv: data.csv is empty");
  EXPECT_ERROR(parse_csv("\n  \n", "data.csv"), "data.csv is empty");
  EXPECT_ERROR(parse_csv("\xEF\xBB\xBF", "data.csv"), "data.csv is empty");
}

TEST(Csv, HeaderWithoutRowsIsAnError) {
  EXPECT_ERROR(parse_csv("a,b\n", "data.csv"), "data.csv has a header but no data rows");
  EXPECT_ERROR(parse_csv("a,b", "data.csv"), "data.csv has a header but no data rows");
}

TEST(Csv, RowWithTooFewCellsNamesItsLine) {
  EXPECT_ERROR(parse_csv("a,b,c\n1,2,3\n\n4,5\n", "data.csv"),
               "data.csv line 4 has 2 cells but the header has 3 columns");
}

TEST(Csv, RowWithTooManyCellsStopsAtTheFirstExtraCell) {
  EXPECT_ERROR(parse_csv("a,b\n1,2,3\n", "data.csv"), "data.csv line 2 has at least 3 cells but the header has 2");
  EXPECT_ERROR(parse_csv("a,b\n1,2,\n"), "line 2 has at least 3 cells");
  // A hostile row of a million cells is refused at its third cell.
  std::string hostile = "a,b\n1,2\n";
  for (int i = 0; i < 1'000'000; ++i) hostile += "1,";
  EXPECT_ERROR(parse_csv(hostile), "line 3 has at least 3 cells but the header has 2 columns");
}

TEST(Csv, BadCellNamesLineAndColumn) {
  EXPECT_ERROR(parse_csv("a,b,c\n1,2,3\n4,x5,6\n", "data.csv"),
               "parse_csv: data.csv line 3, column 2 (b): \"x5\" is not a finite number");
  EXPECT_ERROR(parse_csv("a,b\n1,2abc\n"), "line 2, column 2 (b): \"2abc\"");
  EXPECT_ERROR(parse_csv("a,b\n1,inf\n"), "column 2 (b): \"inf\" is not a finite number");
  EXPECT_ERROR(parse_csv("a,b\n1,1e999\n"), "column 2 (b): \"1e999\" is not a finite number");
}

TEST(Csv, BadHeaderNamesTheColumn) {
  EXPECT_ERROR(parse_csv("a,,c\n1,2,3\n", "data.csv"), "data.csv line 1: column 2 of the header has no name");
  EXPECT_ERROR(parse_csv("a,\"\",c\n1,2,3\n"), "line 1: column 2 of the header has no name");
  EXPECT_ERROR(parse_csv("\na,b,a\n1,2,3\n"),
               "line 2: column name \"a\" appears twice in the header (columns 1 and 3)");
  EXPECT_ERROR(parse_csv("a,\"a\"\n1,2\n"), "column name \"a\" appears twice in the header (columns 1 and 2)");
}

TEST(Csv, TooManyColumnsIsAnError) {
  std::string header;
  for (int i = 0; i <= 1'000'000; ++i) header += "c" + std::to_string(i) + ",";
  header.back() = '\n';
  EXPECT_ERROR(parse_csv(header + "1\n", "data.csv"), "data.csv line 1: the header has more than 1000000 columns");
}

TEST(Csv, QuotedHeaderNamesAreUnquoted) {
  CsvTable table = parse_csv("\"age\", \"body mass\" ,\" padded \",\"say \"\"hi\"\"\",\"x,y\"\n1,2,3,4,5\n");
  EXPECT_EQ(table.columns, (std::vector<std::string>{"age", "body mass", " padded ", "say \"hi\"", "x,y"}));
  EXPECT_EQ(table.values, (std::vector<double>{1, 2, 3, 4, 5}));
}

TEST(Csv, QuotedCellsAreNumbersWithTheirInnerSpaces) {
  CsvTable table = parse_csv("a,b\n\"1.5\", \"-2\"\n");
  EXPECT_EQ(table.values, (std::vector<double>{1.5, -2}));
  EXPECT_ERROR(parse_csv("a,b\n1,\" 2\"\n"), "line 2, column 2 (b): \" 2\" is not a finite number");
}

TEST(Csv, QuotedLineEndsAreDataAndLinesKeepCounting) {
  // Lines: 1 `"a`, 2 `A","b`, 3 `B"`, 4 `1,2`, 5 `3,x`.
  CsvTable table = parse_csv("\"a\nA\",\"b\r\nB\"\n1,2\n");
  EXPECT_EQ(table.columns, (std::vector<std::string>{"a\nA", "b\r\nB"}));
  EXPECT_EQ(table.values, (std::vector<double>{1, 2}));
  EXPECT_ERROR(parse_csv("\"a\nA\",\"b\r\nB\"\n1,2\n3,x\n"), "line 5, column 2 (b\\x0d\\x0aB): \"x\"");
  EXPECT_ERROR(parse_csv("\"a\rA\",\"b\r\rB\"\n1,2\n3,x\n"), "line 6, column 2");
  // The line of a field is the one where it starts, also inside a record that spans lines.
  EXPECT_ERROR(parse_csv("\"a\nA\",b\"\n"), "line 2, column 2: a quote inside the unquoted field \"b\"\"");
}

TEST(Csv, ByteOrderMarkIsSkipped) {
  CsvTable table = parse_csv(
      "\xEF\xBB\xBF"
      "age,bmi\n1,2\n");
  EXPECT_EQ(table.columns.front(), "age");
  EXPECT_EQ(parse_csv("\xEF\xBB\xBF\"age\",bmi\n1,2\n").columns.front(), "age");
}

TEST(Csv, CrLfAndLoneCrEndRecords) {
  CsvTable table = parse_csv("a,b\r\n1,2\r3,4\r\n\r\n\r5,6");
  EXPECT_EQ(table.values, (std::vector<double>{1, 2, 3, 4, 5, 6}));
  EXPECT_ERROR(parse_csv("a\r1\r\rx\r"), "line 4, column 1 (a): \"x\"");
  EXPECT_ERROR(parse_csv("a\r\n1\r\n\r\nx\r\n"), "line 4, column 1 (a): \"x\"");
}

TEST(Csv, UnterminatedQuoteNamesTheLineWhereItOpened) {
  EXPECT_ERROR(parse_csv("a,b\n1,\"2\n3\n4\n", "data.csv"),
               "parse_csv: data.csv line 2, column 2 (b): the quote that opens this field is not closed before the "
               "end of the text");
  EXPECT_ERROR(parse_csv("a,\"b\n1,2\n"), "line 1, column 2: the quote that opens this field is not closed");
  EXPECT_ERROR(parse_csv("a,b\n1,\"2\"\"\n"), "line 2, column 2 (b): the quote that opens");
}

TEST(Csv, QuoteInsideAnUnquotedFieldIsAnError) {
  EXPECT_ERROR(parse_csv("a,b\n1,2\"3\"\n", "data.csv"),
               "data.csv line 2, column 2 (b): a quote inside the unquoted field \"2\"3\"\" (quote the whole field)");
  EXPECT_ERROR(parse_csv("a,b\"\n1,2\n"), "line 1, column 2: a quote inside the unquoted field \"b\"\"");
}

TEST(Csv, TextAfterAClosingQuoteIsAnError) {
  EXPECT_ERROR(parse_csv("a,b\n\"1\"x,2\n", "data.csv"),
               "data.csv line 2, column 1 (a): text \"x\" after the closing quote of a quoted field");
  EXPECT_ERROR(parse_csv("a,b\n1,\"2\" \"3\"\n"), "line 2, column 2 (b): text \"\"3\"\" after the closing quote");
  EXPECT_EQ(parse_csv("a,b\n\"1\" \t,\"2\"  \n").values, (std::vector<double>{1, 2}));
}

const std::vector<std::string> kMissingCells = {"", "NA", "N/A", "NaN", "nan", "null", "NULL", "None", "?", "\"\""};

TEST(Csv, MissingValueIsAnErrorByDefault) {
  for (const std::string& cell : kMissingCells) {
    SCOPED_TRACE(cell);
    const std::string text = "age,sex,bmi\n\n1,2,3\n4,5,6\n7,8,9\n10,11,12\n13,14," + cell + "\n";
    const std::string shown = cell == "\"\"" ? "" : cell;
    const std::string expected =
        "parse_csv: data.csv line 7, column 3 (bmi): missing value \"" + shown +
        "\"; expected a number (to skip such rows: MissingValues::DropRow, or tandem-train --missing drop-row)";
    EXPECT_EQ(error_message([&] { parse_csv(text, "data.csv"); }), expected);
    EXPECT_EQ(error_message([&] { parse_csv(text, "data.csv", CsvOptions{MissingValues::Error}); }), expected);
  }
}

TEST(Csv, MissingTokensAreCaseSensitive) {
  for (const std::string cell : {"na", "Null", "NONE", "n/a", "\" NA\"", "??"}) {
    SCOPED_TRACE(cell);
    EXPECT_ERROR(parse_csv("a,b\n1," + cell + "\n", "data.csv", kDropRows), "is not a finite number");
  }
}

TEST(Csv, DropRowSkipsAndCountsRowsWithMissingValues) {
  for (const std::string& cell : kMissingCells) {
    SCOPED_TRACE(cell);
    CsvTable table = parse_csv("a,b,c\n1,2,3\n" + cell + ",5,6\n7,8,9\n10," + cell + "," + cell + "\n11,12,13",
                               "data.csv", kDropRows);
    EXPECT_EQ(table.rows(), 3);
    EXPECT_EQ(table.values, (std::vector<double>{1, 2, 3, 7, 8, 9, 11, 12, 13}));
    EXPECT_EQ(table.dropped_rows, 2);
  }
}

TEST(Csv, DropRowStillChecksTheOtherCells) {
  EXPECT_ERROR(parse_csv("a,b,c\n1,NA,x\n", "data.csv", kDropRows), "line 2, column 3 (c): \"x\" is not a finite");
  EXPECT_ERROR(parse_csv("a,b,c\n1,NA\n", "data.csv", kDropRows), "line 2 has 2 cells but the header has 3");
  EXPECT_ERROR(parse_csv("a,b\nNA,1\n1,NA\n", "data.csv", kDropRows),
               "data.csv has no data rows left: all 2 rows have a missing value (dropped by MissingValues::DropRow)");
}

TEST(Csv, MessagesQuoteAtMostAnExcerptOfHugeText) {
  const std::string huge(50'000'000, '7');
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"a,b\n1," + huge + "x\n", "... (50000001 bytes)\" is not a finite number"},
      {"a,b\n1," + huge + "\"\n", "(50000001 bytes)\" (quote the whole field)"},
      {"a,b\n1,\"2\"" + huge + "\n", "(50000000 bytes)\" after the closing quote"},
      {"a," + huge + "\n1,x\n", "column 2 (" + std::string(60, '7') + "... (50000000 bytes)): \"x\""},
      {huge + "," + huge + "\n1,2\n", "(50000000 bytes)\" appears twice"},
  };
  for (const auto& [text_of_case, fragment] : cases) {
    const std::string& text = text_of_case;  // clang 14 cannot capture a structured binding
    const std::string message = error_message([&] { parse_csv(text, "data.csv"); });
    EXPECT_LT(message.size(), 200u) << message.substr(0, 300);
    EXPECT_NE(message.find(fragment), std::string::npos) << message.substr(0, 300);
  }
}

// CsvOptions::delimiter: semicolons, tabs (TSV: only spaces are trimmed) or pipes between fields; quotes protect a
// delimiter inside a field; a quote, line end or space cannot be one.
TEST(Csv, OtherDelimiters) {
  CsvOptions semicolons;
  semicolons.delimiter = ';';
  CsvTable table = parse_csv("\"a;1\";b\n1.5;2\n3; 4\n", "data.csv", semicolons);
  EXPECT_EQ(table.columns, (std::vector<std::string>{"a;1", "b"}));
  EXPECT_EQ(table.values, (std::vector<double>{1.5, 2, 3, 4}));
  EXPECT_ERROR(parse_csv("a;b\n1,5;2\n", "data.csv", semicolons), "\"1,5\" is not a finite number");
  CsvOptions tabs;
  tabs.delimiter = '\t';
  table = parse_csv("a\tb\n 1 \t2\n\t3\n", "data.tsv", {.missing = MissingValues::DropRow, .delimiter = '\t'});
  EXPECT_EQ(table.values, (std::vector<double>{1, 2}));
  EXPECT_EQ(table.dropped_rows, 1);  // the empty first cell of the last row
  EXPECT_ERROR(parse_csv("a,b\n1,2\n", "data.tsv", tabs), "\"1,2\" is not a finite number");
  for (const char bad : {'"', '\n', '\r', ' '}) {
    CsvOptions options;
    options.delimiter = bad;
    EXPECT_ERROR(parse_csv("a\n1\n", "data.csv", options), "cannot separate fields");
  }
}

// CsvOptions::keep_column: the columns it leaves out are skipped unread, so text and gaps there are no error and
// drop no row; the table keeps the whole header.
TEST(Csv, SkippedColumnsAreNotRead) {
  CsvOptions options;
  options.keep_column = [](const std::string& name, size_t, size_t) { return name != "notes"; };
  const CsvTable table = parse_csv("x,notes,y\n1,first row,2\n3,,4\n", "data.csv", options);
  EXPECT_EQ(table.columns, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(table.header, (std::vector<std::string>{"x", "notes", "y"}));
  EXPECT_EQ(table.values, (std::vector<double>{1, 2, 3, 4}));
  EXPECT_ERROR(parse_csv("x,notes,y\n1,2\n", "data.csv", options), "line 2 has 2 cells but the header has 3");
  options.keep_column = [](const std::string&, size_t index, size_t count) { return index + 1 == count; };
  EXPECT_EQ(parse_csv("a,b\nt,5\n", "data.csv", options).values, (std::vector<double>{5}));
  options.keep_column = [](const std::string&, size_t, size_t) { return false; };
  EXPECT_ERROR(parse_csv("a,b\n1,2\n", "data.csv", options), "data.csv: keep_column keeps none of its 2 columns");
  EXPECT_ERROR(parse_csv("x,notes\n1,text\n", "data.csv"), "(notes): \"text\" is not a finite number");
}

TEST(Csv, ReadCsvParsesARegularFileWithOptions) {
  const std::string path = testing::scratch_path("missing.csv");
  std::ofstream(path, std::ios::binary) << "\xEF\xBB\xBF\"a\",b\r\n1,2\r\nNA,3\r\n";
  EXPECT_ERROR(read_csv(path), "read_csv: " + path + " line 3, column 1 (a): missing value \"NA\"");
  CsvTable table = read_csv(path, kDropRows);
  EXPECT_EQ(table.columns, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(table.values, (std::vector<double>{1, 2}));
  EXPECT_EQ(table.dropped_rows, 1);
  std::remove(path.c_str());
}

TEST(Csv, ReadCsvNamesTheFile) {
  EXPECT_ERROR(read_csv("/nonexistent/data.csv"),
               "read_csv: '/nonexistent/data.csv': cannot open the file: No such file or directory");
  const std::string path = testing::scratch_path("ragged.csv");
  std::ofstream(path) << "a,b\n1,2\n3\n";
  EXPECT_ERROR(read_csv(path), "read_csv: " + path + " line 3 has 1 cells but the header has 2 columns");
  std::ofstream(path, std::ios::trunc).flush();
  EXPECT_ERROR(read_csv(path), path + " is empty");
  std::ofstream(path, std::ios::trunc) << "a,b\n";
  EXPECT_ERROR(read_csv(path), path + " has a header but no data rows");
  std::remove(path.c_str());
}

#if defined(__SANITIZE_ADDRESS__)
#define TANDEM_TEST_ADDRESS_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TANDEM_TEST_ADDRESS_SANITIZER 1
#endif
#endif

// A file larger than the machine's memory (a sparse 1 TiB file, which takes no disk) is an Error naming it, not a
// bare std::bad_alloc.
TEST(Csv, AFileTooLargeForMemoryIsAnErrorNamingIt) {
#ifdef TANDEM_TEST_ADDRESS_SANITIZER
  GTEST_SKIP() << "AddressSanitizer ends the process on an allocation it cannot serve instead of throwing";
#else
  // With overcommit always on (mode 1), the allocation would succeed and the read fill the memory instead.
  if (std::ifstream("/proc/sys/vm/overcommit_memory").get() == '1') GTEST_SKIP() << "memory overcommit is always on";
  const std::string path = testing::scratch_path("huge.csv");
  std::ofstream(path) << "a,b\n1,2\n";
  std::filesystem::resize_file(path, uintmax_t{1} << 40);
  EXPECT_ERROR(read_csv(path), "read_csv: '" + path + "' (1099511627776 bytes): out of memory while reading it");
  std::filesystem::remove(path);
#endif
}

TEST(Csv, ReadCsvRefusesDirectoriesFifosAndDevicesWithoutBlocking) {
  const std::string fifo = testing::scratch_path("fifo.csv");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string directory = testing::scratch_path("directory.csv");
  ASSERT_EQ(mkdir(directory.c_str(), 0700), 0);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {directory, "read_csv: '" + directory + "': it is a directory, but only regular files can be read"},
      {fifo, "read_csv: '" + fifo + "': it is a FIFO, but only regular files can be read"},
      {"/dev/zero", "read_csv: '/dev/zero': it is a character device, but only regular files can be read"},
  };
  for (const auto& [path_of_case, expected] : cases) {
    const std::string& path = path_of_case;  // clang 14 cannot capture a structured binding
    SCOPED_TRACE(path);
    auto message = std::async(std::launch::async, [&path] { return error_message([&] { read_csv(path); }); });
    if (message.wait_for(std::chrono::seconds(10)) == std::future_status::timeout) {
      ADD_FAILURE() << "read_csv blocked";
      ::close(::open(fifo.c_str(), O_WRONLY | O_NONBLOCK));  // releases a reader that waits for a writer
    }
    EXPECT_EQ(message.get(), expected);
  }
  std::remove(fifo.c_str());
  rmdir(directory.c_str());
}

TEST(Csv, BuiltInDiabetesIsTheBundledFile) {
  std::ifstream file(TANDEM_SOURCE_DIR "/data/diabetes.csv", std::ios::binary);
  ASSERT_TRUE(file.is_open());
  std::ostringstream contents;
  contents << file.rdbuf();
  EXPECT_EQ(std::string(datasets::diabetes_csv()), contents.str());

  CsvTable table = parse_csv(datasets::diabetes_csv());
  EXPECT_EQ(table.rows(), 442);
  ASSERT_EQ(table.columns.size(), 11u);
  EXPECT_EQ(table.columns.front(), "age");
  EXPECT_EQ(table.columns.back(), "target");
  EXPECT_EQ(table.at(0, 0), 59.0);  // first row: 59,2,32.1,101.0,157,93.2,38.0,4.0,4.8598,87,151
  EXPECT_EQ(table.at(0, 8), 4.8598);
  EXPECT_EQ(table.at(0, 10), 151.0);
  EXPECT_EQ(table.dropped_rows, 0);
  EXPECT_EQ(read_csv(TANDEM_SOURCE_DIR "/data/diabetes.csv").values, table.values);
}

}  // namespace
}  // namespace tandem::trainers
