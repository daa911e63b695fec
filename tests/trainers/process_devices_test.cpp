// process_devices: which devices a process of a job drives for a --devices text.
#include "support/test_support.h"

namespace tandem::trainers {
namespace {

comm::LaunchInfo machine_with(int local_rank, int local_size) {
  comm::LaunchInfo launch;
  launch.channel = comm::LaunchInfo::Channel::Mpi;
  launch.rank = local_rank;
  launch.size = local_size;
  launch.local_rank = local_rank;
  launch.local_size = local_size;
  return launch;
}

TEST(ProcessDevices, AllSplitsTheGpusBetweenTheProcessesOfAMachine) {
  EXPECT_EQ(process_devices("all", machine_with(0, 2), 4), (std::vector<Device>{Device::cuda(0), Device::cuda(1)}));
  EXPECT_EQ(process_devices("all", machine_with(1, 2), 4), (std::vector<Device>{Device::cuda(2), Device::cuda(3)}));
  EXPECT_EQ(process_devices("all", machine_with(2, 3), 8), (std::vector<Device>{Device::cuda(4), Device::cuda(5)}));
  EXPECT_EQ(process_devices("all", machine_with(1, 2), 2), (std::vector<Device>{Device::cuda(1)}));
  EXPECT_EQ(process_devices("all", comm::LaunchInfo{}, 2), (std::vector<Device>{Device::cuda(0), Device::cuda(1)}));
}

TEST(ProcessDevices, AllWithoutGpusIsTheCpuDevicesInEveryProcess) {
  const std::vector<Device> cpus{Device::cpu(0), Device::cpu(1)};
  EXPECT_EQ(process_devices("all", machine_with(0, 2), 0), cpus);
  EXPECT_EQ(process_devices("all", machine_with(1, 2), 0), cpus);
}

TEST(ProcessDevices, AListIsTakenAsGiven) {
  EXPECT_EQ(process_devices("cpu:0", machine_with(1, 2), 0), (std::vector<Device>{Device::cpu(0)}));
  EXPECT_EQ(process_devices("cpu:1,cpu:2", machine_with(0, 2), 0),
            (std::vector<Device>{Device::cpu(1), Device::cpu(2)}));
}

TEST(ProcessDevices, RefusesFewerGpusThanProcessesAndBadLists) {
  EXPECT_ERROR(process_devices("all", machine_with(0, 4), 2),
               "process_devices: 'all' for 4 processes on this machine but it has 2 GPUs");
  EXPECT_ERROR(process_devices("cpu:0,cpu:0x", machine_with(0, 1), 0), "cpu:0x");
}

}  // namespace
}  // namespace tandem::trainers
