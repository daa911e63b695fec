#include <regex>
#include <string>

#include "support/test_support.h"

namespace tandem {
namespace {

TEST(BuildInfo, AgreesWithTheLibraryItDescribes) {
  const BuildInfo& info = build_info();
  EXPECT_TRUE(std::regex_match(info.version, std::regex("[0-9]+\\.[0-9]+\\.[0-9]+"))) << info.version;
  EXPECT_EQ(info.cuda, cuda_built());
  EXPECT_EQ(info.cuda_version.empty(), !info.cuda) << info.cuda_version;
  EXPECT_EQ(info.cuda_architectures.empty(), !info.cuda) << info.cuda_architectures;
  EXPECT_EQ(info.nccl_version.empty(), !info.cuda) << info.nccl_version;
  EXPECT_EQ(info.mpi_version.empty(), !info.mpi) << info.mpi_version;
  EXPECT_FALSE(info.compiler.empty());
}

TEST(BuildInfo, SummaryNamesEachFactOnItsOwnLine) {
  const BuildInfo& info = build_info();
  const std::string summary = build_summary();
  EXPECT_EQ(summary.rfind("tandem " + info.version + "\n", 0), 0u) << summary;
  EXPECT_NE(summary.find("\nbuild: " + info.build_type + ", " + info.compiler + ", C++20"), std::string::npos)
      << summary;
  const std::string cuda = info.cuda ? "\nCUDA: " + info.cuda_version + " for architectures " +
                                           info.cuda_architectures + ", NCCL " + info.nccl_version + "\n"
                                     : std::string("\nCUDA: not built");
  EXPECT_NE(summary.find(cuda), std::string::npos) << summary;
  EXPECT_NE(summary.find(info.mpi ? "\nMPI: MPI " + info.mpi_version : std::string("\nMPI: not built")),
            std::string::npos)
      << summary;
  EXPECT_EQ(summary.back(), '\n');
}

}  // namespace
}  // namespace tandem
