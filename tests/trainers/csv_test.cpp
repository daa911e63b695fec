#include <unistd.h>

#include <fstream>
#include <sstream>

#include "support/test_support.h"

namespace tandem::trainers {
namespace {

TEST(Csv, ParsesHeaderAndNumbers) {
  CsvTable table = parse_csv(" a , b,c\n1,2.5,-3\r\n\n+4, 5e-1 ,6\n");
  EXPECT_EQ(table.columns, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(table.rows(), 2);
  EXPECT_EQ(table.values, (std::vector<double>{1, 2.5, -3, 4, 0.5, 6}));
  EXPECT_EQ(table.at(1, 2), 6.0);
}

TEST(Csv, EmptyTextIsAnError) {
  EXPECT_ERROR(parse_csv("", "data.csv"), "parse_csv: data.csv is empty");
  EXPECT_ERROR(parse_csv("\n  \n", "data.csv"), "data.csv is empty");
}

TEST(Csv, HeaderWithoutRowsIsAnError) {
  EXPECT_ERROR(parse_csv("a,b\n", "data.csv"), "data.csv has a header but no data rows");
}

TEST(Csv, RaggedRowNamesItsLine) {
  EXPECT_ERROR(parse_csv("a,b,c\n1,2,3\n\n4,5\n", "data.csv"),
               "data.csv line 4 has 2 cells but the header has 3 columns");
  EXPECT_ERROR(parse_csv("a,b\n1,2,3\n", "data.csv"), "line 2 has 3 cells but the header has 2 columns");
}

TEST(Csv, BadCellNamesLineAndColumn) {
  EXPECT_ERROR(parse_csv("a,b,c\n1,2,3\n4,x5,6\n", "data.csv"),
               "data.csv line 3, column 2 (b): \"x5\" is not a finite number");
  EXPECT_ERROR(parse_csv("a,b\n1,2abc\n"), "line 2, column 2 (b): \"2abc\"");
  EXPECT_ERROR(parse_csv("a,b\n1,\n"), "line 2, column 2 (b): \"\" is not a finite number");
  EXPECT_ERROR(parse_csv("a,b\nnan,1\n"), "line 2, column 1 (a): \"nan\"");
  EXPECT_ERROR(parse_csv("a,b\n1,inf\n"), "column 2 (b): \"inf\"");
}

TEST(Csv, BadHeaderIsAnError) {
  EXPECT_ERROR(parse_csv("a,,c\n1,2,3\n", "data.csv"), "data.csv line 1: column 2 of the header has no name");
  EXPECT_ERROR(parse_csv("a,b,a\n1,2,3\n"), "column name \"a\" appears twice");
}

TEST(Csv, ReadCsvNamesTheFile) {
  EXPECT_ERROR(read_csv("/nonexistent/data.csv"), "read_csv: cannot open \"/nonexistent/data.csv\"");
  const std::string path = ::testing::TempDir() + "tandem_csv_" + std::to_string(getpid()) + "_ragged.csv";
  std::ofstream(path) << "a,b\n1,2\n3\n";
  EXPECT_ERROR(read_csv(path), "read_csv: " + path + " line 3 has 1 cells but the header has 2 columns");
  std::ofstream(path, std::ios::trunc).flush();
  EXPECT_ERROR(read_csv(path), path + " is empty");
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
  EXPECT_EQ(table.at(0, 0), 59.0);    // first row: 59,2,32.1,101.0,157,93.2,38.0,4.0,4.8598,87,151
  EXPECT_EQ(table.at(0, 8), 4.8598);
  EXPECT_EQ(table.at(0, 10), 151.0);
}

}  // namespace
}  // namespace tandem::trainers
