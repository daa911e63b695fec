#pragma once
// Shared test helpers: the same test body on every device, references, finite-difference gradient checks.

#include <gtest/gtest.h>
#include <tandem/tandem.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "support/scratch.h"

namespace tandem::testing {

// Skips the current test unless `count` GPUs are visible, saying how many there are.
#define TANDEM_REQUIRE_GPUS(count)                                                                   \
  do {                                                                                                \
    if (::tandem::cuda_device_count() < (count))                                                      \
      GTEST_SKIP() << ::tandem::testing::missing_gpus_reason(count);                                  \
  } while (false)

std::string missing_gpus_reason(int needed);

// Value-parameterized base: the same body runs on CPU and CUDA; the CUDA instance skips without a GPU.
// Instantiate with TANDEM_INSTANTIATE_ON_EVERY_DEVICE(Suite): test names end in /CPU and /CUDA.
class EveryDevice : public ::testing::TestWithParam<DeviceType> {
 protected:
  void SetUp() override;
  Device device() const { return GetParam() == DeviceType::CPU ? Device::cpu(0) : Device::cuda(0); }
};
std::string device_type_name(const ::testing::TestParamInfo<DeviceType>& info);
#define TANDEM_INSTANTIATE_ON_EVERY_DEVICE(Suite)                                                    \
  INSTANTIATE_TEST_SUITE_P(Devices, Suite, ::testing::Values(::tandem::DeviceType::CPU,                  \
                                                             ::tandem::DeviceType::CUDA),              \
                           ::tandem::testing::device_type_name)

// The first GPU, for tests of the CUDA backend (which skip without one).
inline const Device kGpu = Device::cuda(0);

// Device lists for multi-device tests: "CPU2" = {cpu:0, cpu:1}, "CPU3", "MultiCUDA" = {cuda:0, cuda:1},
// "Mixed" = {cpu:0, cuda:0} (needs 1 GPU). Instances skip when the GPUs are missing.
enum class DeviceSet { CPU2, CPU3, MultiCUDA, Mixed };
class EveryDeviceSet : public ::testing::TestWithParam<DeviceSet> {
 protected:
  void SetUp() override;
  std::vector<Device> devices() const;
};
std::string device_set_name(const ::testing::TestParamInfo<DeviceSet>& info);
#define TANDEM_INSTANTIATE_ON_EVERY_DEVICE_SET(Suite)                                                 \
  INSTANTIATE_TEST_SUITE_P(Sets, Suite,                                                                \
                           ::testing::Values(::tandem::testing::DeviceSet::CPU2,                       \
                                             ::tandem::testing::DeviceSet::CPU3,                       \
                                             ::tandem::testing::DeviceSet::MultiCUDA,                  \
                                             ::tandem::testing::DeviceSet::Mixed),                     \
                           ::tandem::testing::device_set_name)

// Expects max |actual - expected| <= tolerance * max(max |expected|, 1) over the elements of tensors of any
// device and floating dtype, printing the worst element and the largest relative error where |expected| > 1e-3.
void expect_near_relative(const Tensor& actual, const Tensor& expected, double tolerance, const std::string& what);
// max |actual - expected| / max |expected| over the elements (the shapes must match: a failure otherwise), for
// replays whose tensors are far below 1 (gradients): each within that fraction of its tensor's largest magnitude.
double scaled_deviation(const Tensor& actual, const Tensor& expected);

// Expects `actual` (any device) to equal `expected` elementwise within atol + rtol * |expected|, and its shape to
// be `shape`. Reports the first mismatching index.
void expect_values(const Tensor& actual, const std::vector<double>& expected, const Shape& shape,
                   double rtol = 1e-5, double atol = 1e-6);
// Same, for two tensors on any devices.
void expect_close(const Tensor& actual, const Tensor& expected, double rtol = 1e-5, double atol = 1e-6);
// Expects `actual` (any device) to be an int64 tensor of shape `shape` holding exactly `expected`.
void expect_int64_values(const Tensor& actual, const std::vector<int64_t>& expected, const Shape& shape);
// Expects `statement` to throw tandem::Error whose message contains `fragment`.
#define EXPECT_ERROR(statement, fragment)                                                            \
  do {                                                                                                \
    try {                                                                                             \
      statement;                                                                                      \
      ADD_FAILURE() << "expected tandem::Error containing \"" << (fragment) << "\"";                  \
    } catch (const ::tandem::Error& e) {                                                              \
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)                              \
          << "message: " << e.what() << "\nexpected to contain: " << (fragment);                      \
    }                                                                                                 \
  } while (false)

// `message` without the " (file:line)" that Error messages end with where detail::error_location_wanted() (debug
// builds, TANDEM_ERROR_LOCATION=1), so that a test can compare whole messages in every build.
std::string without_error_location(const std::string& message);

// The message of the tandem::Error that `action` throws; a test failure (and "") when it throws none.
std::string error_message_of(const std::function<void()>& action);

// autograd::gradcheck (tandem/core/gradcheck.h) with the given step and tolerances; a failure of the test instead
// of an exception.
void gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f, const std::vector<Tensor>& inputs,
               double eps = 1e-2, double rtol = 2e-2, double atol = 2e-3);

// A dropout-like layer for tests of randomness under threads: forward zeroes each element of its input with
// probability 1/2 and doubles the others, by a mask drawn with Tensor::rand on the input's device. Before drawing it
// sleeps 0 to 2 ms, a duration taken from std::random_device (never from tandem's generator), so that replicas
// running at once reach their draws in a different order on every run.
class JitteredDropout : public nn::Cloneable<JitteredDropout> {
 public:
  Tensor forward(const Tensor& input) override;
};

// Keeps `gpu`'s compute stream busy for `duration` of wall-clock time (one GPU thread waiting on the GPU's clock), so
// that work queued after it has certainly not run when the host looks a moment later. A chain of large products did
// this before; under compute-sanitizer, which slows every instrumented instruction, such a chain ran for many
// minutes, while a wait on the clock lasts as long as it says.
void hold_compute_stream(Device gpu, std::chrono::milliseconds duration);
// Its backend (tests/support/cuda or tests/support/nocuda): the hold on cuda:`device`, unchecked.
void hold_compute_stream_of(int device, int64_t nanoseconds);

// Host-side float64 references.
std::vector<double> to_double(const Tensor& tensor);
std::vector<double> matmul_reference(const std::vector<double>& a, const std::vector<double>& b, int64_t m,
                                     int64_t k, int64_t n);

// Sets a process-wide switch (a getter and setter pair, as allow_tf32 and set_allow_tf32) for a scope.
template <bool (*kGet)(), void (*kSet)(bool)>
class ScopedSwitch {
 public:
  explicit ScopedSwitch(bool value) : previous_(kGet()) { kSet(value); }
  ~ScopedSwitch() { kSet(previous_); }
  ScopedSwitch(const ScopedSwitch&) = delete;
  ScopedSwitch& operator=(const ScopedSwitch&) = delete;

 private:
  bool previous_;
};

// Every reduction of the losses, for tests that run each one.
inline constexpr nn::Reduction kReductions[] = {nn::Reduction::None, nn::Reduction::Mean, nn::Reduction::Sum};

// The diabetes data set built into tandem (trainers::datasets::diabetes_csv), split as tandem-train splits it: the
// last 20% of the rows for testing. Read once per process.
const trainers::Split& diabetes();

}  // namespace tandem::testing

namespace tandem {
// How GoogleTest prints a GeneratorState: "{seed 7, counter 10, cpu:1 6, cuda:0 5}".
void PrintTo(const GeneratorState& state, std::ostream* os);
}  // namespace tandem
