// Errors: messages built from untrusted text stay short and on one line; internal asserts say that they are bugs in
// tandem and where; file:line in messages exactly when wanted; failures on paths that must not throw are reported.
#include <algorithm>
#include <cstdlib>
#include <functional>
#include <new>
#include <string>

#include "support/test_support.h"

namespace tandem {
namespace {

using testing::error_message_of;
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

bool ends_with_location_of_line(const std::string& message, int line) {
  return message.ends_with("error_test.cpp:" + std::to_string(line) + ")");
}

TEST(InternalAssert, ThrowsAnInternalErrorThatSaysItIsABugAndWhere) {
  const int value = 3;
  int line = 0;
  try {
    line = __LINE__ + 1;
    TANDEM_INTERNAL_ASSERT(value == 2, "io::Reader::next: value is ", value, " but expected 2");
    ADD_FAILURE() << "the assert passed";
  } catch (const InternalError& e) {
    const std::string message = e.what();
    const std::string expected = "io::Reader::next: value is 3 but expected 2 (internal assert failed: value == 2 at ";
    EXPECT_TRUE(message.starts_with(expected)) << message;
    EXPECT_NE(message.find("this is a bug in tandem"), std::string::npos) << message;
    EXPECT_NE(message.find("error_test.cpp:" + std::to_string(line) + ";"), std::string::npos) << message;
  }
}

TEST(InternalAssert, IsCaughtWhereErrorsAreCaught) {
  EXPECT_ERROR(TANDEM_INTERNAL_ASSERT(1 + 1 == 3, "fn: broken"), "fn: broken (internal assert failed: 1 + 1 == 3");
  EXPECT_ERROR(TANDEM_INTERNAL_ASSERT(false), "(internal assert failed: false at ");
  // A user-facing check stays a plain Error.
  try {
    TANDEM_CHECK(false, "fn: bad input");
  } catch (const InternalError&) {
    ADD_FAILURE() << "TANDEM_CHECK threw an InternalError";
  } catch (const Error&) {
  }
}

TEST(InternalAssert, FormatsNothingWhenTheConditionHolds) {
  int formatted = 0;
  const auto part = [&] {
    ++formatted;
    return "part";
  };
  TANDEM_INTERNAL_ASSERT(true, "fn: ", part());
  TANDEM_CHECK(true, "fn: ", part());
  EXPECT_EQ(formatted, 0);
}

TEST(ErrorLocation, IsAppendedOnlyWhenWanted) {
  EXPECT_EQ(detail::error_message("fn: bad", "core/src/x.cpp", 42, true), "fn: bad (core/src/x.cpp:42)");
  EXPECT_EQ(detail::error_message("fn: bad", "core/src/x.cpp", 42, false), "fn: bad");
}

TEST(ErrorLocation, IsWantedInDebugBuildsAndOnRequestInReleaseBuilds) {
#ifdef NDEBUG
  const char* requested = std::getenv("TANDEM_ERROR_LOCATION");
  EXPECT_EQ(detail::error_location_wanted(), requested != nullptr && std::string(requested) == "1");
#else
  EXPECT_TRUE(detail::error_location_wanted());
#endif
}

TEST(ErrorLocation, ChecksEndWithTheirFileAndLineExactlyWhenWanted) {
  int line = 0;
  const std::string message = error_message_of([&] {
    line = __LINE__ + 1;
    TANDEM_CHECK(false, "fn: bad input");
  });
  EXPECT_TRUE(message.starts_with("fn: bad input")) << message;
  EXPECT_EQ(ends_with_location_of_line(message, line), detail::error_location_wanted()) << message;
}

TEST(ErrorLocation, InternalErrorsCarryItInEveryBuild) {
  EXPECT_EQ(detail::internal_error_message("fn: broken", "a < b", "core/src/x.cpp", 7),
            "fn: broken (internal assert failed: a < b at core/src/x.cpp:7; this is a bug in tandem, please report "
            "it)");
  EXPECT_EQ(detail::internal_error_message("", "a < b", "core/src/x.cpp", 7),
            "(internal assert failed: a < b at core/src/x.cpp:7; this is a bug in tandem, please report it)");
}

TEST(ReportOnce, ReportsTheFirstFailureOnStderrAndThrowsNothing) {
  static constinit detail::ReportOnce site("test::free_path");
  static_assert(noexcept(site.run([] {})));
  ::testing::internal::CaptureStderr();
  site.run([] { TANDEM_INTERNAL_ASSERT(false, "alloc::free: block 0x10 is not live"); });
  site.run([] { TANDEM_FAIL("a second failure"); });
  site.run([] {});
  const std::string output = ::testing::internal::GetCapturedStderr();
  const std::string expected = "tandem: test::free_path: alloc::free: block 0x10 is not live (internal assert failed: ";
  EXPECT_TRUE(output.starts_with(expected)) << output;
  EXPECT_NE(output.find("reported instead of thrown"), std::string::npos) << output;
  EXPECT_EQ(output.find("a second failure"), std::string::npos) << output;
  EXPECT_EQ(std::count(output.begin(), output.end(), '\n'), 1) << output;
}

TEST(ReportOnce, ReportsExceptionsOfAnyType) {
  static constinit detail::ReportOnce bad_alloc_site("test::bad_alloc");
  static constinit detail::ReportOnce int_site("test::int");
  ::testing::internal::CaptureStderr();
  bad_alloc_site.run([] { throw std::bad_alloc(); });
  int_site.run([] { throw 42; });
  const std::string output = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(output.find("tandem: test::bad_alloc: std::bad_alloc"), std::string::npos) << output;
  EXPECT_NE(output.find("tandem: test::int: an exception that is not a std::exception"), std::string::npos) << output;
}

TEST(ReportOnce, DoesNotReportWhenNothingFails) {
  static constinit detail::ReportOnce site("test::quiet");
  int runs = 0;
  ::testing::internal::CaptureStderr();
  site.run([&] { ++runs; });
  site.run([&] { ++runs; });
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(runs, 2);
}

}  // namespace
}  // namespace tandem
