#include "support/test_support.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <random>
#include <sstream>
#include <thread>

namespace tandem::testing {

std::string error_message_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a tandem::Error";
  return "";
}

std::string without_error_location(const std::string& message) {
  if (!detail::error_location_wanted() || !message.ends_with(')')) return message;
  const size_t open = message.rfind(" (");
  const size_t colon = message.rfind(':');
  if (open == std::string::npos || colon == std::string::npos || colon < open) return message;
  const std::string line = message.substr(colon + 1, message.size() - colon - 2);
  const bool digits =
      !line.empty() && std::all_of(line.begin(), line.end(), [](char c) { return c >= '0' && c <= '9'; });
  return digits ? message.substr(0, open) : message;
}

const trainers::Split& diabetes() {
  static const trainers::Split split = trainers::train_test_split(
      trainers::make_dataset(trainers::parse_csv(trainers::datasets::diabetes_csv()), "target"), 0.2);
  return split;
}

std::string missing_gpus_reason(int needed) {
  std::ostringstream os;
  os << "needs " << needed << " CUDA device(s), " << cuda_device_count() << " visible"
     << (cuda_built() ? "" : " (tandem was built without CUDA)");
  return os.str();
}

void EveryDevice::SetUp() {
  if (GetParam() == DeviceType::CUDA) TANDEM_REQUIRE_GPUS(1);
}

std::string device_type_name(const ::testing::TestParamInfo<DeviceType>& info) {
  return info.param == DeviceType::CPU ? "CPU" : "CUDA";
}

void EveryDeviceSet::SetUp() {
  if (GetParam() == DeviceSet::MultiCUDA) TANDEM_REQUIRE_GPUS(2);
  if (GetParam() == DeviceSet::Mixed) TANDEM_REQUIRE_GPUS(1);
}

std::vector<Device> EveryDeviceSet::devices() const {
  switch (GetParam()) {
    case DeviceSet::CPU2: return {Device::cpu(0), Device::cpu(1)};
    case DeviceSet::CPU3: return {Device::cpu(0), Device::cpu(1), Device::cpu(2)};
    case DeviceSet::MultiCUDA: return {Device::cuda(0), Device::cuda(1)};
    case DeviceSet::Mixed: return {Device::cpu(0), Device::cuda(0)};
  }
  return {};
}

std::string device_set_name(const ::testing::TestParamInfo<DeviceSet>& info) {
  switch (info.param) {
    case DeviceSet::CPU2: return "CPU2";
    case DeviceSet::CPU3: return "CPU3";
    case DeviceSet::MultiCUDA: return "MultiCUDA";
    case DeviceSet::Mixed: return "Mixed_CUDA";
  }
  return "unknown";
}

std::vector<double> to_double(const Tensor& tensor) {
  std::vector<float> values = tensor.to_vector();
  return {values.begin(), values.end()};
}

void expect_values(const Tensor& actual, const std::vector<double>& expected, const Shape& shape, double rtol,
                   double atol) {
  ASSERT_TRUE(actual.defined());
  ASSERT_EQ(to_string(actual.shape()), to_string(shape));
  std::vector<double> values = to_double(actual);
  ASSERT_EQ(values.size(), expected.size());
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_LE(std::abs(values[i] - expected[i]), atol + rtol * std::abs(expected[i]))
        << "at flat index " << i << ": got " << values[i] << ", expected " << expected[i] << " (on "
        << actual.device() << ")";
  }
}

void expect_close(const Tensor& actual, const Tensor& expected, double rtol, double atol) {
  ASSERT_TRUE(expected.defined());
  expect_values(actual, to_double(expected), expected.shape(), rtol, atol);
}

void expect_int64_values(const Tensor& actual, const std::vector<int64_t>& expected, const Shape& shape) {
  ASSERT_TRUE(actual.defined());
  ASSERT_EQ(actual.dtype(), DType::Int64);
  ASSERT_EQ(to_string(actual.shape()), to_string(shape));
  EXPECT_EQ(actual.to_vector_as<int64_t>(), expected) << "on " << actual.device();
}

std::vector<double> matmul_reference(const std::vector<double>& a, const std::vector<double>& b, int64_t m,
                                     int64_t k, int64_t n) {
  std::vector<double> out(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < n; ++j) out[i * n + j] += a[i * k + p] * b[p * n + j];
  return out;
}

Tensor JitteredDropout::forward(const Tensor& input) {
  thread_local std::minstd_rand jitter(std::random_device{}());
  std::this_thread::sleep_for(std::chrono::microseconds(jitter() % 2000));
  std::vector<float> mask = Tensor::rand(input.shape(), input.device()).to_vector();
  for (float& keep : mask) keep = keep < 0.5f ? 0.0f : 2.0f;
  return input * Tensor::from_vector(mask, input.shape(), input.device());
}

void hold_compute_stream(Device gpu, std::chrono::milliseconds duration) {
  TANDEM_CHECK(gpu.is_cuda(), "hold_compute_stream: device ", gpu, " but expected a CUDA device");
  TANDEM_CHECK(duration.count() > 0, "hold_compute_stream: duration ", duration.count(), " ms but expected > 0");
  hold_compute_stream_of(gpu.index(), std::chrono::duration_cast<std::chrono::nanoseconds>(duration).count());
}

void gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f, const std::vector<Tensor>& inputs,
               double eps, double rtol, double atol) {
  try {
    autograd::gradcheck(f, inputs, {.eps = eps, .atol = atol, .rtol = rtol});
  } catch (const Error& e) {
    ADD_FAILURE() << e.what();
  }
}

void expect_near_relative(const Tensor& actual, const Tensor& expected, double tolerance, const std::string& what) {
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  const std::vector<double> a = to_double(actual.to(DType::Float32));
  const std::vector<double> b = to_double(expected.to(DType::Float32));
  double max_error = 0, max_value = 0, worst_rel = 0;
  size_t worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double error = std::abs(a[i] - b[i]);
    if (!(error <= max_error)) {  // NaN counts as the worst
      max_error = error;
      worst = i;
    }
    max_value = std::max(max_value, std::abs(b[i]));
    if (std::abs(b[i]) > 1e-3) worst_rel = std::max(worst_rel, error / std::abs(b[i]));
  }
  const double bound = tolerance * std::max(max_value, 1.0);
  EXPECT_TRUE(max_error <= bound) << what << ": max abs error " << max_error << " at element " << worst << " (got "
                                  << a[worst] << ", expected " << b[worst] << "), max |expected| " << max_value
                                  << ", bound " << bound << ", max rel error where |expected| > 1e-3: " << worst_rel;
}

double scaled_deviation(const Tensor& actual, const Tensor& expected) {
  EXPECT_EQ(actual.shape(), expected.shape());
  if (actual.shape() != expected.shape()) return std::numeric_limits<double>::infinity();
  const std::vector<double> a = to_double(actual), e = to_double(expected);
  double deviation = 0.0, scale = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double error = std::abs(a[i] - e[i]);
    if (std::isnan(error)) return std::numeric_limits<double>::infinity();
    deviation = std::max(deviation, error);
    scale = std::max(scale, std::abs(e[i]));
  }
  return deviation / scale;
}

}  // namespace tandem::testing

namespace tandem {

void PrintTo(const GeneratorState& state, std::ostream* os) {
  *os << "{seed " << state.seed << ", counter " << state.counter;
  for (const auto& [device, counter] : state.device_counters) *os << ", " << device << " " << counter;
  *os << "}";
}

}  // namespace tandem
