// Messages built from untrusted text stay short and on one line.
#include "support/test_support.h"

namespace tandem {
namespace {

TEST(ExcerptTest, ShortPrintableTextIsUnchanged) { EXPECT_EQ(excerpt("bmi"), "bmi"); }

TEST(ExcerptTest, LongTextIsCutWithItsLength) {
  const std::string cell(50'000'000, '9');
  const std::string shown = excerpt(cell);
  EXPECT_EQ(shown, std::string(60, '9') + "... (50000000 bytes)");
  EXPECT_EQ(excerpt("abcdef", 3), "abc... (6 bytes)");
}

TEST(ExcerptTest, ControlAndNonAsciiBytesAreEscaped) {
  EXPECT_EQ(excerpt(std::string("a\nb\r\0c\xEF\\", 8)), "a\\x0ab\\x0d\\x00c\\xef\\x5c");
}

}  // namespace
}  // namespace tandem
