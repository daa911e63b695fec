// parallel::data_parallel and parallel::DataParallel: same outputs and gradients as a single-device forward.

#include "parallel/parallel_test_helpers.h"

namespace tandem::testing {
namespace {

class DataParallelTest : public EveryDeviceSet {};

// Forward + mean-squared loss through data_parallel and through a plain forward of an equal net on devices[0];
// expects equal outputs and equal gradients on the master parameters.
void expect_same_as_single_device(const std::vector<Device>& devices, int64_t rows,
                                  std::optional<Device> output_device = std::nullopt) {
  SCOPED_TRACE("batch of " + std::to_string(rows) + " rows");
  auto net = make_net(devices[0]);
  auto reference = make_net(devices[0]);
  const Tensor x = seeded_randn({rows, 4}, devices[0], 100 + rows);
  const Tensor y = seeded_randn({rows, 2}, devices[0], 200 + rows);
  const Tensor output = parallel::data_parallel(net, x, devices, output_device);
  const Tensor expected = reference->forward(x);
  EXPECT_EQ(output.device(), output_device.value_or(devices[0]));
  expect_close(output, expected);
  nn::mse_loss(output, y.to(output.device())).backward();
  nn::mse_loss(expected, y).backward();
  expect_gradients_close(*net, gradients_of(*reference));
}

TEST_P(DataParallelTest, SameOutputAndGradientsAsOneDevice) {
  for (int64_t rows : {12, 7, 5}) expect_same_as_single_device(devices(), rows);  // even and uneven splits
}

TEST_P(DataParallelTest, FewerRowsThanDevicesUsesFewerDevices) {
  for (int64_t rows : {2, 1}) expect_same_as_single_device(devices(), rows);
}

TEST_P(DataParallelTest, OutputDevice) { expect_same_as_single_device(devices(), 5, devices().back()); }

TEST_P(DataParallelTest, OneDeviceIsAPlainForwardAndMovesTheInput) {
  const auto devices = this->devices();
  auto net = make_net(devices[0]);
  const Tensor x = seeded_randn({3, 4}, devices[1], 9).set_requires_grad();
  const Tensor output = parallel::data_parallel(net, x, {devices[0]});
  EXPECT_EQ(output.device(), devices[0]);
  expect_close(output, net->forward(x.to(devices[0])));
  sum(output).backward();
  EXPECT_EQ(x.grad().device(), devices[1]);
  EXPECT_TRUE(net->fc1->weight.grad().defined());
}

// Scales column j of its input by scale[j]: a layer for which scattering along dim 1 is meaningful.
class ColumnScale : public nn::Cloneable<ColumnScale> {
 public:
  explicit ColumnScale(Device device) : scale(Tensor::from_vector({1, -2, 3, 0.5f, 4}, {5}, device)) {
    register_parameter("scale", scale);
  }
  Tensor forward(const Tensor& x) override { return x * scale.narrow(0, offset(x), x.size(1)); }
  // The chunk's first column, recovered from the marker row 0 (which holds the column indices).
  static int64_t offset(const Tensor& x) { return static_cast<int64_t>(x.to_vector().front()); }
  Tensor scale;
};

TEST_P(DataParallelTest, ScatterAndGatherAlongDimOne) {
  const auto devices = this->devices();
  // ColumnScale needs whole-width scales per chunk, so it is replicated per chunk along dim 1 and each replica
  // picks its columns through the marker row.
  auto layer = std::make_shared<ColumnScale>(devices[0]);
  const Tensor x = Tensor::from_vector({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {2, 5}, devices[0]);
  const Tensor output = parallel::data_parallel(layer, x, devices, std::nullopt, 1);
  expect_values(output, {0, -2, 6, 1.5, 16, 5, -12, 21, 4, 36}, {2, 5});
  sum(output).backward();
  expect_values(layer->scale.grad(), {5, 7, 9, 11, 13}, {5});
}

TEST_P(DataParallelTest, WithGradModeOffNothingIsRecorded) {
  const auto devices = this->devices();
  auto net = make_net(devices[0]);
  NoGradGuard no_grad;
  const Tensor output = parallel::data_parallel(net, seeded_randn({5, 4}, devices[0], 11), devices);
  EXPECT_TRUE(output.grad_fn() == nullptr);
  EXPECT_FALSE(output.requires_grad());
}

TEST_P(DataParallelTest, DataParallelModuleWrapsTheModule) {
  const auto devices = this->devices();
  auto net = make_net(devices[0]);
  auto reference = make_net(devices[0]);
  auto wrapped = std::make_shared<parallel::DataParallel>(net, devices);
  EXPECT_EQ(wrapped->module(), net);
  EXPECT_EQ(wrapped->devices(), devices);
  EXPECT_EQ(wrapped->output_device(), devices[0]);
  const auto named = wrapped->named_parameters();
  const auto inner = net->parameters();
  ASSERT_EQ(named.size(), inner.size());
  EXPECT_EQ(named.front().first, "module.fc1.weight");
  for (size_t i = 0; i < inner.size(); ++i) EXPECT_TRUE(named[i].second.is_same(inner[i]));

  const Tensor x = seeded_randn({7, 4}, devices[0], 12);
  const Tensor output = (*wrapped)(x);
  expect_close(output, reference->forward(x));
  sum(output).backward();
  sum(reference->forward(x)).backward();
  expect_gradients_close(*net, gradients_of(*reference));
}

TEST_P(DataParallelTest, DocumentedErrors) {
  const auto devices = this->devices();
  auto net = make_net(devices[1]);
  const Tensor x = Tensor::zeros({4, 4}, devices[0]);
  EXPECT_ERROR(parallel::data_parallel(net, x, devices),
               "parallel::data_parallel: parameter 'fc1.weight' is on " + devices[1].str() + " but expected " +
                   devices[0].str() + " (devices[0])");
  EXPECT_ERROR(parallel::data_parallel(nullptr, x, devices), "parallel::data_parallel: module is null");
  EXPECT_ERROR(parallel::data_parallel(net, Tensor(), devices), "parallel::data_parallel: input is undefined");
  EXPECT_ERROR(parallel::data_parallel(net, x, {devices[1], Device::cuda(7)}), "cuda:7 does not exist");
  EXPECT_ERROR(parallel::DataParallel(nullptr, devices), "parallel::DataParallel: module is null");
  EXPECT_ERROR(parallel::DataParallel(net, {Device::cuda(7)}), "cuda:7 does not exist");
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE_SET(DataParallelTest);

TEST(DataParallelDefaults, DevicesDefaultToTheDefaultDevices) {
  const std::vector<Device> devices = default_devices();
  auto net = make_net(devices[0]);
  const Tensor x = seeded_randn({5, 4}, devices[0], 13);
  expect_close(parallel::data_parallel(net, x), make_net(devices[0])->forward(x));
  EXPECT_EQ(parallel::DataParallel(net).devices(), devices);
}

}  // namespace
}  // namespace tandem::testing
