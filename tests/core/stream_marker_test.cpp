// StreamMarker: a recorded point on a device's compute stream (an event on CUDA, nothing on a CPU device).
#include "support/test_support.h"

namespace tandem {
namespace {

class StreamMarkerTest : public testing::EveryDevice {};

TEST_P(StreamMarkerTest, RecordsOnItsDeviceAndCopiesShareTheRecord) {
  const StreamMarker marker = StreamMarker::record(device());
  EXPECT_EQ(marker.device(), device());
  EXPECT_EQ(marker.event() != nullptr, device().is_cuda()) << "CPU work is done when its call returns";
  const StreamMarker copy = marker;
  EXPECT_EQ(copy.event(), marker.event());
  // A later marker marks a later point: it never shares the record of one still alive.
  const StreamMarker later = StreamMarker::record(device());
  if (device().is_cuda()) EXPECT_NE(later.event(), marker.event());
}

TEST_P(StreamMarkerTest, DefaultMarkerMarksNothingAndMissingGpusAreErrors) {
  const StreamMarker nothing;
  EXPECT_EQ(nothing.device(), Device::cpu(0));
  EXPECT_EQ(nothing.event(), nullptr);
  EXPECT_ERROR(StreamMarker::record(Device::cuda(7)), "StreamMarker::record: device cuda:7 does not exist");
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(StreamMarkerTest);

}  // namespace
}  // namespace tandem
