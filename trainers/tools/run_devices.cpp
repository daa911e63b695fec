#include "run_devices.h"

#include "tandem/core/tensor.h"

namespace tandem::train_tool {

std::string describe_devices(const comm::ProcessGroup& group) {
  if (group.size() == 1) return to_string(group.devices());
  return std::to_string(group.size()) + " processes x " + to_string(group.devices());
}

std::vector<std::vector<std::string>> rank_devices(comm::ProcessGroup& group) {
  std::vector<Tensor> mine;  // one row (type, index) per local device, on that device
  for (const Device& device : group.devices()) {
    const std::vector<float> row = {static_cast<float>(device.type()), static_cast<float>(device.index())};
    mine.push_back(Tensor::from_vector(row, {1, 2}, device));
  }
  const std::vector<float> rows = group.all_gather(mine).front().to_vector();  // in global device order
  const size_t per_rank = group.devices().size();
  std::vector<std::vector<std::string>> lists(static_cast<size_t>(group.size()));
  for (size_t g = 0; g < rows.size() / 2; ++g) {
    const Device device(static_cast<DeviceType>(rows[2 * g]), static_cast<int>(rows[2 * g + 1]));
    lists[g / per_rank].push_back(device.str());
  }
  return lists;
}

}  // namespace tandem::train_tool
