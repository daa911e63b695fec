// LaunchInfo::from_environment: every launcher's variables, their precedence, and the errors for bad values.

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "support/test_support.h"

namespace tandem {
namespace {

using comm::LaunchInfo;

// Every variable that LaunchInfo reads: unset for each test, restored afterwards.
const char* const kLauncherVariables[] = {
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "PMI_RANK",
    "PMI_SIZE",
    "MPI_LOCALRANKID",
    "MPI_LOCALNRANKS",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_NODEID",
    "PMIX_RANK",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "TANDEM_INIT_METHOD",
    "TANDEM_JOB_ID",
    "TORCHELASTIC_RUN_ID",
    "MASTER_ADDR",
    "MASTER_PORT",
};

class LaunchInfoFromEnvironment : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : kLauncherVariables) {
      const char* value = std::getenv(name);
      saved_[name] = value ? std::optional<std::string>(value) : std::nullopt;
      unsetenv(name);
    }
  }
  void TearDown() override {
    for (const auto& [name, value] : saved_) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }
  static void set(const char* name, const char* value) { setenv(name, value, 1); }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

void expect_info(const LaunchInfo& info, LaunchInfo::Channel channel, int rank, int size, int local_rank,
                 int local_size) {
  EXPECT_EQ(info.channel, channel);
  EXPECT_EQ(info.rank, rank);
  EXPECT_EQ(info.size, size);
  EXPECT_EQ(info.local_rank, local_rank);
  EXPECT_EQ(info.local_size, local_size);
}

TEST_F(LaunchInfoFromEnvironment, NothingSetIsAGroupOfOneProcess) {
  expect_info(LaunchInfo::from_environment(), LaunchInfo::Channel::None, 0, 1, 0, 1);
}

TEST_F(LaunchInfoFromEnvironment, ReadsOpenMpisVariables) {
  set("OMPI_COMM_WORLD_RANK", "5");
  set("OMPI_COMM_WORLD_SIZE", "8");
  set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
  set("OMPI_COMM_WORLD_LOCAL_SIZE", "4");
  expect_info(LaunchInfo::from_environment(), LaunchInfo::Channel::Mpi, 5, 8, 1, 4);
}

TEST_F(LaunchInfoFromEnvironment, ReadsPmiVariablesWithOrWithoutLocalPlacement) {
  set("PMI_RANK", "2");
  set("PMI_SIZE", "3");
  expect_info(LaunchInfo::from_environment(), LaunchInfo::Channel::Mpi, 2, 3, 0, 1);
  set("MPI_LOCALRANKID", "0");
  set("MPI_LOCALNRANKS", "2");
  expect_info(LaunchInfo::from_environment(), LaunchInfo::Channel::Mpi, 2, 3, 0, 2);
}

TEST_F(LaunchInfoFromEnvironment, ReadsSrunsVariables) {
  set("SLURM_PROCID", "3");
  set("SLURM_NTASKS", "4");
  set("SLURM_LOCALID", "1");
  set("SLURM_NTASKS_PER_NODE", "2");
  expect_info(LaunchInfo::from_environment(), LaunchInfo::Channel::Mpi, 3, 4, 1, 2);
}

TEST_F(LaunchInfoFromEnvironment, TakesSrunsLocalSizeFromThisNodesEntryOfTheStepTasks) {
  set("SLURM_PROCID", "6");
  set("SLURM_NTASKS", "7");
  set("SLURM_LOCALID", "0");
  set("SLURM_STEP_TASKS_PER_NODE", "2(x3),1");
  set("SLURM_NODEID", "3");
  expect_info(LaunchInfo::from_environment(), LaunchInfo::Channel::Mpi, 6, 7, 0, 1);
  set("SLURM_NODEID", "2");
  set("SLURM_LOCALID", "1");
  set("SLURM_PROCID", "5");
  expect_info(LaunchInfo::from_environment(), LaunchInfo::Channel::Mpi, 5, 7, 1, 2);
  set("SLURM_STEP_TASKS_PER_NODE", "2(x3");
  EXPECT_ERROR(LaunchInfo::from_environment(),
               "LaunchInfo::from_environment: SLURM_STEP_TASKS_PER_NODE is \"2(x3\" but expected counts like");
  set("SLURM_STEP_TASKS_PER_NODE", "2,2");
  set("SLURM_NODEID", "4");
  EXPECT_ERROR(LaunchInfo::from_environment(), "SLURM_NODEID is 4, past its last node");
  // Repeats that add up past INT_MAX: the node's entry is found without overflowing.
  set("SLURM_STEP_TASKS_PER_NODE", "1(x2147483647),2(x2147483647)");
  set("SLURM_NODEID", "2147483647");
  expect_info(LaunchInfo::from_environment(), LaunchInfo::Channel::Mpi, 5, 7, 1, 2);
  set("SLURM_NODEID", "2147483646");
  set("SLURM_LOCALID", "0");
  expect_info(LaunchInfo::from_environment(), LaunchInfo::Channel::Mpi, 5, 7, 0, 1);
}

TEST_F(LaunchInfoFromEnvironment, PmixAloneLeavesTheSizeToMpi) {
  set("PMIX_RANK", "1");
  expect_info(LaunchInfo::from_environment(), LaunchInfo::Channel::Mpi, 1, 0, 0, 1);
}

TEST_F(LaunchInfoFromEnvironment, MpiLaunchersWinOverTorchrunStyleVariables) {
  set("RANK", "0");
  set("WORLD_SIZE", "2");
  set("TANDEM_INIT_METHOD", "file:///tmp/rendezvous");
  set("SLURM_PROCID", "1");
  set("SLURM_NTASKS", "2");
  set("PMI_RANK", "0");
  set("PMI_SIZE", "4");
  set("OMPI_COMM_WORLD_RANK", "3");
  set("OMPI_COMM_WORLD_SIZE", "6");
  expect_info(LaunchInfo::from_environment(), LaunchInfo::Channel::Mpi, 3, 6, 0, 1);
  unsetenv("OMPI_COMM_WORLD_RANK");
  unsetenv("OMPI_COMM_WORLD_SIZE");
  expect_info(LaunchInfo::from_environment(), LaunchInfo::Channel::Mpi, 0, 4, 0, 1);  // PMI before Slurm
  unsetenv("PMI_RANK");
  unsetenv("PMI_SIZE");
  expect_info(LaunchInfo::from_environment(), LaunchInfo::Channel::Mpi, 1, 2, 0, 1);
}

TEST_F(LaunchInfoFromEnvironment, TorchrunStyleVariablesWithAFileRendezvous) {
  set("RANK", "1");
  set("WORLD_SIZE", "4");
  set("LOCAL_RANK", "1");
  set("LOCAL_WORLD_SIZE", "2");
  set("TANDEM_INIT_METHOD", "file:///shared/job/rendezvous");
  const LaunchInfo info = LaunchInfo::from_environment();
  expect_info(info, LaunchInfo::Channel::File, 1, 4, 1, 2);
  EXPECT_EQ(info.rendezvous_path, "/shared/job/rendezvous");
}

// Note [File rendezvous]: the job id that keeps jobs on one rendezvous path apart, from the first variable that gives
// one.
TEST_F(LaunchInfoFromEnvironment, TheJobIdComesFromTheLaunchersVariables) {
  set("RANK", "0");
  set("WORLD_SIZE", "2");
  set("TANDEM_INIT_METHOD", "file:///shared/r");
  EXPECT_EQ(LaunchInfo::from_environment().job_id, "");
  set("MASTER_ADDR", "10.0.0.1");
  EXPECT_EQ(LaunchInfo::from_environment().job_id, "") << "MASTER_ADDR alone is not an id";
  set("MASTER_PORT", "29500");
  EXPECT_EQ(LaunchInfo::from_environment().job_id, "10.0.0.1:29500");
  set("TORCHELASTIC_RUN_ID", "none");  // torchrun's default: no id
  EXPECT_EQ(LaunchInfo::from_environment().job_id, "10.0.0.1:29500");
  set("TORCHELASTIC_RUN_ID", "5c3e1f0a-77b2");
  EXPECT_EQ(LaunchInfo::from_environment().job_id, "5c3e1f0a-77b2");
  set("TANDEM_JOB_ID", "train.v2_run-7");
  EXPECT_EQ(LaunchInfo::from_environment().job_id, "train.v2_run-7");
  for (const std::string& bad :
       std::vector<std::string>{"", "a/b", "..", "has space", std::string(129, 'x'), "nul\x01"}) {
    set("TANDEM_JOB_ID", bad.c_str());
    EXPECT_ERROR(LaunchInfo::from_environment(),
                 "LaunchInfo::from_environment: TANDEM_JOB_ID is \"" + excerpt(bad) +
                     "\" but expected a job id of 1 to 128 letters, digits and \".:_-\"");
  }
  unsetenv("TANDEM_JOB_ID");
  unsetenv("TORCHELASTIC_RUN_ID");
  set("MASTER_ADDR", "host/x");
  EXPECT_ERROR(LaunchInfo::from_environment(), "MASTER_ADDR:MASTER_PORT is \"host/x:29500\"");
}

TEST_F(LaunchInfoFromEnvironment, TorchrunStyleWorldOfOneNeedsNoInitMethod) {
  set("RANK", "0");
  set("WORLD_SIZE", "1");
  expect_info(LaunchInfo::from_environment(), LaunchInfo::Channel::None, 0, 1, 0, 1);
  set("WORLD_SIZE", "2");
  set("RANK", "1");
  EXPECT_ERROR(LaunchInfo::from_environment(),
               "LaunchInfo::from_environment: WORLD_SIZE is 2 but TANDEM_INIT_METHOD is not set");
}

TEST_F(LaunchInfoFromEnvironment, InitMethodMustBeAnAbsoluteFileUrl) {
  set("RANK", "0");
  set("WORLD_SIZE", "2");
  for (const char* bad : {"tcp://10.0.0.1:29500", "file://relative/path", "file:///", "/tmp/x", ""}) {
    set("TANDEM_INIT_METHOD", bad);
    EXPECT_ERROR(LaunchInfo::from_environment(),
                 std::string("TANDEM_INIT_METHOD is \"") + bad + "\" but expected file:///absolute/path");
  }
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  set("TANDEM_INIT_METHOD", "file:///tmp/x");
  EXPECT_ERROR(LaunchInfo::from_environment(),
               "TANDEM_INIT_METHOD is \"file:///tmp/x\" but RANK and WORLD_SIZE "
               "are not set");
}

TEST_F(LaunchInfoFromEnvironment, ValuesMustBeDecimalIntegersQuotedInTheError) {
  set("OMPI_COMM_WORLD_SIZE", "4");
  for (const char* bad : {"", "-1", "+1", " 1", "1 ", "0x1", "1e3", "99999999999", "two"}) {
    set("OMPI_COMM_WORLD_RANK", bad);
    EXPECT_ERROR(LaunchInfo::from_environment(),
                 std::string("LaunchInfo::from_environment: OMPI_COMM_WORLD_RANK is \"") + excerpt(bad) +
                     "\" but expected a decimal integer in [0, ");
  }
  set("OMPI_COMM_WORLD_RANK", "\x01\xff");
  EXPECT_ERROR(LaunchInfo::from_environment(), "OMPI_COMM_WORLD_RANK is \"\\x01\\xff\"");
  set("OMPI_COMM_WORLD_RANK", "0");
  set("OMPI_COMM_WORLD_SIZE", "0");
  EXPECT_ERROR(LaunchInfo::from_environment(), "OMPI_COMM_WORLD_SIZE is \"0\" but expected a decimal integer in [1, ");
}

TEST_F(LaunchInfoFromEnvironment, RanksMustFallInsideTheirSizes) {
  set("RANK", "4");
  set("WORLD_SIZE", "4");
  set("TANDEM_INIT_METHOD", "file:///tmp/r");
  EXPECT_ERROR(LaunchInfo::from_environment(), "the rank is 4 but the size is 4 (expected rank < size)");
  set("RANK", "3");
  set("LOCAL_RANK", "2");
  set("LOCAL_WORLD_SIZE", "2");
  EXPECT_ERROR(LaunchInfo::from_environment(), "the local rank is 2 but the local size is 2");
  set("LOCAL_RANK", "0");
  set("LOCAL_WORLD_SIZE", "8");
  EXPECT_ERROR(LaunchInfo::from_environment(), "the local size is 8 but the size is 4");
  unsetenv("LOCAL_WORLD_SIZE");
  EXPECT_ERROR(LaunchInfo::from_environment(),
               "got a local rank but no local size (expected both or neither of "
               "LOCAL_RANK and LOCAL_WORLD_SIZE)");
  unsetenv("RANK");
  EXPECT_ERROR(LaunchInfo::from_environment(), "RANK is not set but expected it with torchrun-style variables");
}

TEST_F(LaunchInfoFromEnvironment, SizesAreBoundedBeforeAnythingIsAllocatedForThem) {
  set("RANK", "0");
  set("TANDEM_INIT_METHOD", "file:///tmp/r");
  for (const char* size : {"65537", "200000000", "2147483647"}) {
    set("WORLD_SIZE", size);
    EXPECT_ERROR(LaunchInfo::from_environment(), std::string("LaunchInfo::from_environment: the size is ") + size +
                                                     " but tandem runs at most 65536 "
                                                     "processes");
  }
  set("WORLD_SIZE", "65536");
  EXPECT_EQ(LaunchInfo::from_environment().size, 65536);
}

TEST_F(LaunchInfoFromEnvironment, OneOfOpenMpisPairAloneIsAnError) {
  set("OMPI_COMM_WORLD_RANK", "0");
  EXPECT_ERROR(LaunchInfo::from_environment(), "OMPI_COMM_WORLD_SIZE is not set");
}

}  // namespace
}  // namespace tandem
