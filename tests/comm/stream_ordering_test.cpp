// Comm functions on CUDA are asynchronous: they must be ordered after the kernels that produce their inputs and
// before the kernels that consume their outputs, with no host synchronization (see Note [Comm stream ordering] in
// comm/src/cuda/collective.h, Note [Small copies on their sources' streams] in comm/src/cuda/peer_copies.h and Note
// [Comm peer copy ordering] in comm/src/cuda/peer_copies.cpp). These tests queue a long chain of matrix products on a
// device's compute stream, ending in the tensor handed to a comm function, and use the results right away.
//
// Why they would fail without that ordering: if a collective or copy did not run after the compute stream's work
// (on that stream, or waiting for it), it would read the input while the matmul chain (tens of milliseconds of
// queued work) is still running, that is, memory that still holds whatever the caching allocator's block held
// before: the results would not be the expected constants. If the consumers were not ordered after it, they (and the
// reuse of the freed input blocks by later allocations) could run before it had written (or finished reading) them.
#include "comm/comm_test_helpers.h"
#include "cuda/peer_copies.h"

namespace tandem {
namespace {

constexpr int64_t kSide = 4096;

// A kSide x kSide tensor equal to `value` everywhere, produced by a long chain of matmuls on `device`'s compute
// stream. x @ A with A = 1/kSide everywhere maps all-ones to all-ones exactly: kSide is a power of two, so every
// partial sum is exact in float32 (and in TF32).
Tensor produced_slowly(float value, Device device) {
  const Tensor averaging = Tensor::full({kSide, kSide}, 1.0f / static_cast<float>(kSide), device);
  Tensor x = Tensor::ones({kSide, kSide}, device);
  for (int i = 0; i < 24; ++i) x = matmul(x, averaging);
  return x * value;
}

void expect_constant(const Tensor& t, float value) {
  const std::vector<float> values = t.to_vector();
  for (size_t i = 0; i < values.size(); ++i) ASSERT_EQ(values[i], value) << "at index " << i << " on " << t.device();
}

TEST(CommStreamOrdering, BroadcastWaitsForItsProducer_MultiCUDA) {
  TANDEM_REQUIRE_GPUS(2);
  const std::vector<Device> devs = {Device::cuda(0), Device::cuda(1)};
  std::vector<Tensor> copies;
  {
    const Tensor input = produced_slowly(3.0f, devs[0]);
    copies = comm::broadcast(input, devs);
  }
  // The input's block is free now; a new tensor of the same size likely reuses it, and must not be written before
  // the broadcast has read it.
  const Tensor reuse = Tensor::full({kSide, kSide}, -1.0f, devs[0]);
  const Tensor doubled = copies[1] * 2.0f;  // consumer on cuda:1's compute stream, issued right away
  expect_constant(doubled, 6.0f);
  expect_constant(copies[1], 3.0f);
  expect_constant(reuse, -1.0f);
}

TEST(CommStreamOrdering, ReduceAndAllReduceWaitForProducersOnEveryDevice_MultiCUDA) {
  TANDEM_REQUIRE_GPUS(2);
  const std::vector<Device> devs = {Device::cuda(0), Device::cuda(1)};
  const Tensor sum = comm::reduce_add({produced_slowly(1.0f, devs[0]), produced_slowly(2.0f, devs[1])}, devs[1]);
  expect_constant(sum * 1.0f, 3.0f);

  std::vector<Tensor> tensors = {produced_slowly(4.0f, devs[0]), produced_slowly(5.0f, devs[1])};
  comm::all_reduce(tensors);
  const Tensor consumed0 = tensors[0] + tensors[0];
  const Tensor consumed1 = tensors[1] + tensors[1];
  expect_constant(consumed0, 18.0f);
  expect_constant(consumed1, 18.0f);
}

TEST(CommStreamOrdering, CoalescedScatterAndGatherWaitForProducers_MultiCUDA) {
  TANDEM_REQUIRE_GPUS(2);
  const std::vector<Device> devs = {Device::cuda(0), Device::cuda(1)};
  const std::vector<std::vector<Tensor>> copies =
      comm::broadcast_coalesced({produced_slowly(7.0f, devs[0]), Tensor::ones({3}, devs[0])}, devs, 1024);
  expect_constant(copies[1][0] * 1.0f, 7.0f);

  const std::vector<Tensor> chunks = comm::scatter(produced_slowly(8.0f, devs[0]), devs);
  expect_constant(chunks[1] * 1.0f, 8.0f);

  const Tensor gathered = comm::gather({produced_slowly(1.0f, devs[0]), produced_slowly(2.0f, devs[1])}, 0);
  const std::vector<float> values = (gathered * 1.0f).to_vector();
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_EQ(values[i], i < values.size() / 2 ? 1.0f : 2.0f) << "at index " << i;
  }
}

// all_reduce_async waits for each device's marker only, runs beside later compute work, and is joined at wait().
TEST(CommStreamOrdering, AllReduceAsyncWaitsForItsMarkersAndIsJoinedAtWait_MultiCUDA) {
  TANDEM_REQUIRE_GPUS(2);
  const std::vector<Device> devs = {Device::cuda(0), Device::cuda(1)};
  std::vector<Tensor> tensors = {produced_slowly(4.0f, devs[0]), produced_slowly(5.0f, devs[1])};
  comm::AllReduceWork work =
      comm::all_reduce_async(tensors, {StreamMarker::record(devs[0]), StreamMarker::record(devs[1])});
  const Tensor unrelated = produced_slowly(2.0f, devs[1]);  // compute work after the marker, beside the collective
  work.wait();
  const Tensor consumed0 = tensors[0] + tensors[0];
  const Tensor consumed1 = tensors[1] + tensors[1];
  expect_constant(consumed0, 18.0f);
  expect_constant(consumed1, 18.0f);
  expect_constant(unrelated, 2.0f);
}

// The two paths of scatter and gather (Note [Small copies on their sources' streams] in comm/src/cuda/peer_copies.h):
// copies of up to kSourceStreamCopyBytes in all run on their sources' compute streams, larger ones on the
// communication streams. Either way the copies wait for the producers of their sources (and earlier users of their
// destination blocks) on every device, the consumers of the results wait for them, and a source's block reused at
// once is not overwritten before it has been read.
constexpr int64_t kRowBytes = kSide * static_cast<int64_t>(sizeof(float));
constexpr auto kThresholdBytes = static_cast<int64_t>(comm::cuda_copies::kSourceStreamCopyBytes);
constexpr int64_t kSmallRows = 2;                                // 32 KiB per part or chunk
constexpr int64_t kLargeRows = kThresholdBytes / kRowBytes + 1;  // one part or chunk is over the threshold
static_assert(2 * kSmallRows * kRowBytes <= kThresholdBytes);
static_assert(kLargeRows * kRowBytes > kThresholdBytes && 2 * kLargeRows <= kSide);

void expect_rows(const Tensor& t, const std::vector<float>& row_values) {
  const std::vector<float> values = t.to_vector();
  ASSERT_EQ(values.size(), row_values.size() * static_cast<size_t>(kSide));
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_EQ(values[i], row_values[i / static_cast<size_t>(kSide)]) << "at index " << i << " on " << t.device();
  }
}

TEST(CommStreamOrdering, SmallAndLargeGathersWaitForProducers_MultiCUDA) {
  TANDEM_REQUIRE_GPUS(2);
  const std::vector<Device> devs = {Device::cuda(0), Device::cuda(1)};
  for (const int64_t rows : {kSmallRows, kLargeRows}) {
    for (const Device& destination : devs) {
      SCOPED_TRACE(std::to_string(rows) + " rows per part onto " + destination.str());
      Tensor gathered;
      {
        // Views of the first rows: the copies read them while the rest of each block stays untouched.
        const std::vector<Tensor> parts = {produced_slowly(1.0f, devs[0]).narrow(0, 0, rows),
                                           produced_slowly(2.0f, devs[1]).narrow(0, 0, rows)};
        gathered = comm::gather(parts, 0, destination);
      }
      // The parts' blocks are free now; new tensors of their size likely reuse them, and must not be written
      // before the gather has read them.
      const Tensor reuse0 = Tensor::full({kSide, kSide}, -1.0f, devs[0]);
      const Tensor reuse1 = Tensor::full({kSide, kSide}, -1.0f, devs[1]);
      std::vector<float> expected(static_cast<size_t>(rows), 1.0f);
      expected.resize(static_cast<size_t>(2 * rows), 2.0f);
      expect_rows(gathered * 1.0f, expected);  // a consumer on the destination's compute stream, issued at once
      expect_constant(reuse0, -1.0f);
      expect_constant(reuse1, -1.0f);
    }
  }
}

TEST(CommStreamOrdering, SmallAndLargeScattersWaitForTheirProducer_MultiCUDA) {
  TANDEM_REQUIRE_GPUS(2);
  const std::vector<Device> devs = {Device::cuda(0), Device::cuda(1)};
  for (const int64_t rows : {kSmallRows, kLargeRows}) {
    // Both chunks to cuda:1, so that nothing keeps the source alive; then one chunk stays a view on cuda:0.
    for (const std::vector<Device>& targets : {std::vector<Device>{devs[1], devs[1]}, devs}) {
      SCOPED_TRACE(std::to_string(rows) + " rows per chunk, first chunk on " + targets[0].str());
      std::vector<Tensor> chunks;
      {
        const Tensor source = produced_slowly(8.0f, devs[0]).narrow(0, 0, 2 * rows) * 1.0f;  // a block of its own
        chunks = comm::scatter(source, targets, {rows, rows});
      }
      const Tensor reuse = Tensor::full({2 * rows, kSide}, -1.0f, devs[0]);  // likely the source's block
      for (const Tensor& chunk : chunks) {
        expect_rows(chunk * 1.0f, std::vector<float>(static_cast<size_t>(rows), 8.0f));
      }
      expect_rows(reuse, std::vector<float>(static_cast<size_t>(2 * rows), -1.0f));
    }
  }
}

// Note [One NCCL order per device]: synchronous collectives run on the compute streams and started all-reduces on
// the communication streams; a change of stream waits for the previous launch, in both directions, so each device
// runs the kernels in issue order and every collective sees its final inputs.
TEST(CommStreamOrdering, SynchronousAndStartedCollectivesKeepTheirOrder_MultiCUDA) {
  TANDEM_REQUIRE_GPUS(2);
  const std::vector<Device> devs = {Device::cuda(0), Device::cuda(1)};
  const auto markers = [&] {
    return std::vector<StreamMarker>{StreamMarker::record(devs[0]), StreamMarker::record(devs[1])};
  };
  std::vector<Tensor> started = {produced_slowly(1.0f, devs[0]), produced_slowly(2.0f, devs[1])};
  comm::AllReduceWork first = comm::all_reduce_async(started, markers());
  // Synchronous collectives while the all-reduce is not joined yet: their compute streams wait for it.
  std::vector<Tensor> synchronous = {produced_slowly(3.0f, devs[0]), produced_slowly(4.0f, devs[1])};
  comm::all_reduce(synchronous);
  const Tensor broadcast = comm::broadcast(produced_slowly(5.0f, devs[0]), devs)[1];
  const Tensor reduced = comm::reduce_add({produced_slowly(6.0f, devs[0]), produced_slowly(7.0f, devs[1])}, devs[1]);
  // A started all-reduce after synchronous ones: its communication streams wait for their launches.
  std::vector<Tensor> later = {produced_slowly(8.0f, devs[0]), produced_slowly(9.0f, devs[1])};
  comm::AllReduceWork second = comm::all_reduce_async(later, markers());
  first.wait();
  second.wait();
  for (const Tensor& t : started) expect_constant(t * 1.0f, 3.0f);
  for (const Tensor& t : synchronous) expect_constant(t * 1.0f, 7.0f);
  expect_constant(broadcast * 1.0f, 5.0f);
  expect_constant(reduced * 1.0f, 13.0f);
  for (const Tensor& t : later) expect_constant(t * 1.0f, 17.0f);
}

}  // namespace
}  // namespace tandem
