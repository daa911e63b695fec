// parallel::GradientLayout and GradientReducer on their own: where gradients live in the flat buffers, and when each
// bucket's collective starts (recorded by a collective that calls through to comm's).

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "parallel/parallel_test_helpers.h"
#include "tandem/comm/process_group.h"

namespace tandem::testing {
namespace {

using parallel::GradientCollective;
using parallel::GradientLayout;
using parallel::GradientReducer;

// Parameters a [2], b [3], c [2], d [1] (8 floats). With buckets of 12 bytes (3 floats), formed from the last
// parameter backwards: bucket 0 = [c, d] (elements 5..7), bucket 1 = [b] (2..4), bucket 2 = [a] (0..1).
enum Parameter : size_t { kA, kB, kC, kD };
constexpr size_t kBucketBytes = 12;

std::vector<std::pair<std::string, Tensor>> four_parameters(Device device, bool freeze_b = false) {
  std::vector<std::pair<std::string, Tensor>> named = {{"a", Tensor::zeros({2}, device)},
                                                       {"b", Tensor::zeros({3}, device)},
                                                       {"c", Tensor::zeros({2}, device)},
                                                       {"d", Tensor::zeros({1}, device)}};
  for (auto& [name, parameter] : named) parameter.set_requires_grad(!(freeze_b && name == "b"));
  return named;
}

// Replica r's buffer holds (r + 1) * (k + 1) at element k.
std::vector<Tensor> numbered_buffers(const std::vector<Device>& devices, int64_t numel) {
  std::vector<Tensor> buffers;
  for (size_t r = 0; r < devices.size(); ++r) {
    std::vector<float> values;
    for (int64_t k = 0; k < numel; ++k) values.push_back(static_cast<float>((r + 1) * (k + 1)));
    buffers.push_back(Tensor::from_vector(values, {numel}, devices[r]));
  }
  return buffers;
}

// The sum over the replicas of numbered_buffers: (1 + 2 + ... + replicas) * (k + 1).
std::vector<double> numbered_sum(size_t replicas, int64_t numel) {
  std::vector<double> sum;
  for (int64_t k = 0; k < numel; ++k) sum.push_back(static_cast<double>(replicas * (replicas + 1) / 2 * (k + 1)));
  return sum;
}

void expect_every_buffer_holds(const GradientReducer& reducer, const std::vector<double>& values) {
  for (size_t r = 0; r < reducer.size(); ++r) {
    SCOPED_TRACE("buffer " + std::to_string(r));
    expect_values(reducer.buffers()[r], values, {static_cast<int64_t>(values.size())}, 0.0, 0.0);
  }
}

// comm's collectives, with every call recorded as "start <bucket>" or "run <bucket>" (the bucket found by where its
// slice begins in the buffer).
GradientCollective recording(std::shared_ptr<std::vector<std::string>> calls, const GradientLayout& layout) {
  const auto bucket_of = [buckets = layout.buckets()](const std::vector<Tensor>& slices) {
    for (size_t b = 0; b < buckets.size(); ++b) {
      if (buckets[b].start == slices.front().storage_offset()) return std::to_string(b);
    }
    return std::string("?");
  };
  GradientCollective collective;
  collective.start = [calls, bucket_of](std::vector<Tensor>& slices, const std::vector<StreamMarker>& ready) {
    calls->push_back("start " + bucket_of(slices));
    return comm::all_reduce_async(slices, ready);
  };
  collective.run = [calls, bucket_of](std::vector<Tensor>& slices) {
    calls->push_back("run " + bucket_of(slices));
    comm::all_reduce(slices);
  };
  return collective;
}

using Calls = std::vector<std::string>;

TEST(GradientLayout, PlacesGradientsInOrderAndBucketsFromTheLastParameter) {
  const GradientLayout layout(four_parameters(Device::cpu(0)), kBucketBytes);
  EXPECT_EQ(layout.parameter_count(), 4u);
  EXPECT_EQ(layout.numel(), 8);
  ASSERT_EQ(layout.buckets().size(), 3u);
  const std::vector<std::vector<int64_t>> expected = {{5, 3, 2}, {2, 3, 1}, {0, 2, 1}};  // start, length, parameters
  for (size_t b = 0; b < 3; ++b) {
    const GradientLayout::Bucket& bucket = layout.buckets()[b];
    EXPECT_EQ((std::vector<int64_t>{bucket.start, bucket.length, static_cast<int64_t>(bucket.parameters)}),
              expected[b]);
  }
  EXPECT_EQ(
      (std::vector<size_t>{layout.bucket_of(kA), layout.bucket_of(kB), layout.bucket_of(kC), layout.bucket_of(kD)}),
      (std::vector<size_t>{2, 1, 0, 0}));
  EXPECT_EQ(layout.name(kC), "c");

  const Tensor buffer = Tensor::zeros({8});
  const Tensor b = layout.gradient_view(buffer, kB);
  EXPECT_EQ(b.shape(), (Shape{3}));
  EXPECT_EQ(b.data(), buffer.data() + 2);
  const Tensor last = layout.bucket_view(buffer, 0);
  EXPECT_EQ(last.shape(), (Shape{3}));
  EXPECT_EQ(last.data(), buffer.data() + 5);
}

TEST(GradientLayout, FrozenParametersGetNoPlaceAndLargeOnesABucketOfTheirOwn) {
  const GradientLayout frozen(four_parameters(Device::cpu(0), /*freeze_b=*/true), kBucketBytes);
  EXPECT_EQ(frozen.numel(), 5);
  EXPECT_FALSE(frozen.has_place(kB));
  ASSERT_EQ(frozen.buckets().size(), 2u);  // [c, d] at 2..4, [a] at 0..1
  EXPECT_EQ(frozen.buckets()[0].start, 2);
  EXPECT_EQ(frozen.buckets()[1].length, 2);
  EXPECT_ERROR(frozen.gradient_view(Tensor::zeros({5}), kB),
               "parallel::GradientLayout::gradient_view: parameter 'b' has no place (it does not require grad)");

  const GradientLayout one_float(four_parameters(Device::cpu(0)), 4);
  EXPECT_EQ(one_float.buckets().size(), 4u);  // every parameter alone, each larger than a bucket but d
  const GradientLayout one_bucket(four_parameters(Device::cpu(0)), 1024);
  EXPECT_EQ(one_bucket.buckets().size(), 1u);
}

// Note [Padded buckets]: every bucket's length rounded up to a multiple of pad_to, with zeros after its last
// parameter, moving the buckets after it in the buffer (lower indices).
TEST(GradientLayout, PaddedBucketsAreMultiplesOfPadTo) {
  const std::vector<std::vector<int64_t>> layouts = {
      // pad_to, numel, then start and length of buckets 0, 1, 2, then the offsets of a, b, c, d
      {1, 8, 5, 3, 2, 3, 0, 2, 0, 2, 5, 7},
      {3, 9, 6, 3, 3, 3, 0, 3, 0, 3, 6, 8},
      {4, 12, 8, 4, 4, 4, 0, 4, 0, 4, 8, 10}};
  for (const std::vector<int64_t>& expected : layouts) {
    SCOPED_TRACE("pad_to " + std::to_string(expected[0]));
    const GradientLayout layout(four_parameters(Device::cpu(0)), kBucketBytes, static_cast<size_t>(expected[0]));
    std::vector<int64_t> actual = {expected[0], layout.numel()};
    for (const GradientLayout::Bucket& bucket : layout.buckets()) {
      actual.push_back(bucket.start);
      actual.push_back(bucket.length);
    }
    for (const size_t parameter : {kA, kB, kC, kD}) actual.push_back(layout.offset(parameter));
    EXPECT_EQ(actual, expected);
    const Tensor buffer = Tensor::zeros({layout.numel()});
    EXPECT_EQ(layout.gradient_view(buffer, kD).data(), buffer.data() + layout.offset(kD));
  }
}

TEST(GradientLayout, Errors) {
  EXPECT_ERROR(GradientLayout(four_parameters(Device::cpu(0)), 0),
               "parallel::GradientLayout: bucket_size is 0 but expected > 0");
  EXPECT_ERROR(GradientLayout(four_parameters(Device::cpu(0)), kBucketBytes, 0),
               "parallel::GradientLayout: pad_to is 0 but expected > 0");
  EXPECT_ERROR(GradientLayout({{"w", Tensor()}}, 16), "parallel::GradientLayout: parameter 'w' is undefined");
  const GradientLayout layout(four_parameters(Device::cpu(0)), kBucketBytes);
  EXPECT_ERROR(layout.gradient_view(Tensor::zeros({8}), 4), "gradient_view: parameter 4 but there are 4");
  EXPECT_ERROR(layout.bucket_view(Tensor::zeros({8}), 3), "bucket_view: bucket 3 but there are 3");
  EXPECT_ERROR(layout.bucket_view(Tensor::zeros({2, 4}), 0), "the buffer has shape [2, 4] but expected [8]");
}

class Reducer : public EveryDeviceSet {
 protected:
  GradientLayout layout() const { return GradientLayout(four_parameters(devices()[0]), kBucketBytes); }
  std::unique_ptr<GradientReducer> reducer(const std::shared_ptr<Calls>& calls, size_t bucket_bytes = kBucketBytes) {
    const GradientLayout layout(four_parameters(devices()[0]), bucket_bytes);
    return std::make_unique<GradientReducer>(layout, numbered_buffers(devices(), 8), recording(calls, layout));
  }
};

// A bucket starts when the last replica's part of it is final, not before; the buckets start in the order in which
// they become complete, and finish() then has nothing left to sum.
TEST_P(Reducer, BucketsStartInTheOrderTheyBecomeComplete) {
  const auto calls = std::make_shared<Calls>();
  auto reducer = this->reducer(calls);
  const size_t replicas = reducer->size();
  reducer->begin(replicas);
  for (size_t r = 0; r < replicas; ++r) reducer->mark_ready(r, kC);
  for (size_t r = 0; r + 1 < replicas; ++r) reducer->mark_ready(r, kD);
  EXPECT_EQ(*calls, Calls{}) << "bucket 0 is not final on the last replica yet";
  reducer->mark_ready(replicas - 1, kD);
  EXPECT_EQ(*calls, Calls{"start 0"});
  for (size_t r = replicas; r-- > 0;) reducer->mark_ready(r, kA);  // bucket 2 before bucket 1
  EXPECT_EQ(*calls, (Calls{"start 0", "start 2"}));
  for (size_t r = 0; r < replicas; ++r) reducer->mark_ready(r, kB);
  EXPECT_EQ(*calls, (Calls{"start 0", "start 2", "start 1"}));
  EXPECT_FALSE(reducer->holds_sums());
  reducer->finish();
  EXPECT_EQ(calls->size(), 3u) << "nothing was pending";
  EXPECT_TRUE(reducer->holds_sums());
  expect_every_buffer_holds(*reducer, numbered_sum(replicas, 8));
}

// Buckets with a gradient that never came are summed by finish(), after the started ones, with what the buffers hold.
TEST_P(Reducer, FinishSumsTheBucketsLeftIncomplete) {
  const auto calls = std::make_shared<Calls>();
  auto reducer = this->reducer(calls);
  reducer->begin(reducer->size());
  for (size_t r = 0; r < reducer->size(); ++r) {
    reducer->mark_ready(r, kD);
    reducer->mark_ready(r, kC);
  }
  reducer->mark_ready(0, kA);  // bucket 2 is final on replica 0 only
  EXPECT_EQ(*calls, Calls{"start 0"});
  reducer->finish();
  EXPECT_EQ(*calls, (Calls{"start 0", "run 1", "run 2"}));
  expect_every_buffer_holds(*reducer, numbered_sum(reducer->size(), 8));
}

// Note [Accumulating onto sums]: a step that begins on sums clears replicas 1.., so the sums count once.
TEST_P(Reducer, AStepOnSumsCountsThemOnce) {
  const auto calls = std::make_shared<Calls>();
  auto reducer = this->reducer(calls);
  reducer->reduce();
  EXPECT_EQ(*calls, (Calls{"run 0", "run 1", "run 2"}));
  reducer->begin(reducer->size());
  expect_values(reducer->buffers()[0], numbered_sum(reducer->size(), 8), {8}, 0.0, 0.0);
  for (size_t r = 1; r < reducer->size(); ++r) expect_values(reducer->buffers()[r], std::vector<double>(8, 0.0), {8});
  reducer->finish();  // no gradient came: every bucket is summed at the end
  expect_every_buffer_holds(*reducer, numbered_sum(reducer->size(), 8));
}

// A backward outside a step leaves local gradients in the buffers: reduce() sums again, once.
TEST_P(Reducer, ReduceSumsOnceUntilGradientsArriveOutsideAStep) {
  const auto calls = std::make_shared<Calls>();
  auto reducer = this->reducer(calls);
  reducer->reduce();
  reducer->reduce();
  EXPECT_EQ(calls->size(), 3u);
  reducer->mark_ready(1, kA);
  EXPECT_FALSE(reducer->holds_sums());
  reducer->reduce();
  EXPECT_EQ(calls->size(), 6u);
  reducer->buffers_changed();
  reducer->reduce();
  EXPECT_EQ(calls->size(), 9u);
}

// With one bucket nothing can overlap: the step is summed by finish() with one collective, whatever was marked.
TEST_P(Reducer, ASingleBucketIsSummedByFinish) {
  const auto calls = std::make_shared<Calls>();
  auto reducer = this->reducer(calls, /*bucket_bytes=*/1024);
  reducer->begin(reducer->size());
  for (size_t r = 0; r < reducer->size(); ++r) reducer->mark_ready(r, kD);
  EXPECT_EQ(*calls, Calls{});
  reducer->finish();
  EXPECT_EQ(*calls, Calls{"run 0"});
  expect_every_buffer_holds(*reducer, numbered_sum(reducer->size(), 8));
}

// Hooks on real parameters whose .grad are views of the buffers: backward marks the gradients ready.
TEST_P(Reducer, HooksMarkGradientsReadyAsBackwardAccumulatesThem) {
  const auto devices = this->devices();
  const auto calls = std::make_shared<Calls>();
  const GradientLayout layout = this->layout();
  std::vector<Tensor> buffers;
  for (const Device& device : devices) buffers.push_back(Tensor::zeros({8}, device));
  GradientReducer reducer(layout, buffers, recording(calls, layout));
  std::vector<std::vector<Tensor>> parameters;
  for (size_t r = 0; r < devices.size(); ++r) {
    parameters.emplace_back();
    for (size_t i = 0; i < 4; ++i) {
      Tensor parameter = four_parameters(devices[r])[i].second;
      parameter.set_grad(layout.gradient_view(buffers[r], i));
      parameters.back().push_back(parameter);
    }
    reducer.install_hooks(r, parameters.back());
  }
  reducer.begin(devices.size());
  for (size_t r = 0; r < devices.size(); ++r) (sum(parameters[r][kC]) + sum(parameters[r][kD]) * 2.0f).backward();
  for (size_t r = 0; r < devices.size(); ++r) sum(parameters[r][kA] * 3.0f).backward();
  EXPECT_EQ(*calls, (Calls{"start 0", "start 2"}));
  for (size_t r = 0; r < devices.size(); ++r) sum(parameters[r][kB] * 4.0f).backward();
  reducer.finish();
  EXPECT_EQ(*calls, (Calls{"start 0", "start 2", "start 1"}));
  const auto n = static_cast<double>(devices.size());
  expect_every_buffer_holds(reducer, {3 * n, 3 * n, 4 * n, 4 * n, 4 * n, n, n, 2 * n});
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE_SET(Reducer);

const std::vector<Device> kCpu3 = {Device::cpu(0), Device::cpu(1), Device::cpu(2)};

// Replicas without an input this step have their part of every bucket final from the start.
TEST(GradientReducer, IdleReplicasTakePartWithTheGradientsTheyHold) {
  const auto calls = std::make_shared<Calls>();
  const GradientLayout layout(four_parameters(Device::cpu(0)), kBucketBytes);
  GradientReducer reducer(layout, numbered_buffers(kCpu3, 8), recording(calls, layout));
  reducer.begin(2);
  reducer.mark_ready(1, kA);
  EXPECT_EQ(*calls, Calls{});
  reducer.mark_ready(0, kA);
  EXPECT_EQ(*calls, Calls{"start 2"});
  reducer.finish();
  EXPECT_EQ(*calls, (Calls{"start 2", "run 0", "run 1"}));
  expect_every_buffer_holds(reducer, numbered_sum(3, 8));
}

TEST(GradientReducer, OneReplicaHasNothingToSum) {
  const auto calls = std::make_shared<Calls>();
  const GradientLayout layout(four_parameters(Device::cpu(0)), kBucketBytes);
  GradientReducer reducer(layout, numbered_buffers({Device::cpu(0)}, 8), recording(calls, layout));
  reducer.begin(1);
  for (size_t i = 0; i < 4; ++i) reducer.mark_ready(0, i);
  reducer.finish();
  reducer.reduce();
  EXPECT_EQ(*calls, Calls{});
  expect_every_buffer_holds(reducer, numbered_sum(1, 8));
}

// As PyTorch's reducer: a gradient may be marked ready only once per step; steps do not nest.
TEST(GradientReducer, MisuseIsAnError) {
  const auto calls = std::make_shared<Calls>();
  const std::vector<Device> devices = {Device::cpu(0), Device::cpu(1)};
  const GradientLayout layout(four_parameters(Device::cpu(0)), kBucketBytes);
  GradientReducer reducer(layout, numbered_buffers(devices, 8), recording(calls, layout));
  EXPECT_ERROR(reducer.finish(), "parallel::GradientReducer::finish: no step is open; call begin() first");
  EXPECT_ERROR(reducer.begin(3), "parallel::GradientReducer::begin: got 3 active replicas but there are 2");
  reducer.begin(2);
  EXPECT_ERROR(reducer.begin(2), "parallel::GradientReducer::begin: the previous step is still open");
  EXPECT_ERROR(reducer.reduce(), "parallel::GradientReducer::reduce: a step is open");
  EXPECT_ERROR(reducer.mark_ready(2, kA), "mark_ready: replica 2, parameter 0 but there are 2 replicas and 4");
  EXPECT_ERROR(reducer.mark_ready(0, 4), "mark_ready: replica 0, parameter 4 but there are 2 replicas and 4");
  reducer.mark_ready(1, kC);
  EXPECT_ERROR(reducer.mark_ready(1, kC),
               "parallel::GradientReducer::mark_ready: parameter 'c' of replica 1 received a second gradient in one "
               "step, but its bucket is summed once; run one backward per replica");
  reducer.abandon();

  // Usable again: a whole step sums every buffer.
  reducer.begin(2);
  for (size_t r = 0; r < 2; ++r)
    for (size_t i = 0; i < 4; ++i) reducer.mark_ready(r, i);
  reducer.finish();
  expect_every_buffer_holds(reducer, numbered_sum(2, 8));

  const GradientLayout frozen(four_parameters(Device::cpu(0), /*freeze_b=*/true), kBucketBytes);
  GradientReducer without_b(frozen, numbered_buffers(devices, 5));
  EXPECT_ERROR(without_b.mark_ready(0, kB), "mark_ready: parameter 'b' has no place in the buffers");
}

TEST(GradientReducer, ConstructionAndHookErrors) {
  const GradientLayout layout(four_parameters(Device::cpu(0)), kBucketBytes);
  EXPECT_ERROR(GradientReducer(layout, {}), "parallel::GradientReducer: got no buffers");
  EXPECT_ERROR(GradientReducer(layout, {Tensor::zeros({8}), Tensor::zeros({7}, Device::cpu(1))}),
               "parallel::GradientReducer: buffer 1 has shape [7] and strides [1] but expected a contiguous [8]");
  EXPECT_ERROR(GradientReducer(layout, {Tensor::zeros({8}), Tensor::zeros({8})}),
               "device cpu:0 appears twice (entries 0 and 1) but expected distinct devices");
  GradientCollective without_start;
  without_start.start = nullptr;
  EXPECT_ERROR(GradientReducer(layout, {Tensor::zeros({8})}, without_start),
               "parallel::GradientReducer: the collective's start function is empty");

  GradientReducer reducer(layout, numbered_buffers({Device::cpu(0), Device::cpu(1)}, 8));
  std::vector<Tensor> parameters;
  for (const auto& [name, parameter] : four_parameters(Device::cpu(1))) parameters.push_back(parameter);
  EXPECT_ERROR(reducer.install_hooks(2, parameters), "install_hooks: replica 2 but there are 2");
  EXPECT_ERROR(reducer.install_hooks(1, {parameters[0]}), "install_hooks: got 1 parameters for replica 1 but the ");
  EXPECT_ERROR(reducer.install_hooks(0, parameters),
               "install_hooks: parameter 'a' of replica 0 is on cpu:1 but the replica's buffer is on cpu:0");
  reducer.install_hooks(1, parameters);
  EXPECT_ERROR(reducer.install_hooks(1, parameters), "install_hooks: replica 1 has its hooks already");
}

// Note [Fixed bucket order]: with a collective that spans processes, a bucket that completes early waits for the
// buckets before it; completing the next one launches it and every completed one after it; finish() launches the
// rest in the same order.
TEST(GradientReducer, SpanningProcessesLaunchesTheBucketsInIndexOrder) {
  const auto calls = std::make_shared<Calls>();
  const GradientLayout layout(four_parameters(Device::cpu(0)), kBucketBytes);
  GradientCollective collective = recording(calls, layout);
  collective.spans_processes = true;
  GradientReducer reducer(layout, numbered_buffers({Device::cpu(0), Device::cpu(1)}, 8), collective);
  reducer.begin(2);
  for (size_t r = 0; r < 2; ++r) reducer.mark_ready(r, kA);  // bucket 2 complete first
  for (size_t r = 0; r < 2; ++r) reducer.mark_ready(r, kB);  // then bucket 1
  EXPECT_EQ(*calls, Calls{}) << "buckets 1 and 2 wait for bucket 0";
  for (size_t r = 0; r < 2; ++r) reducer.mark_ready(r, kC);
  reducer.mark_ready(0, kD);
  EXPECT_EQ(*calls, Calls{});
  reducer.mark_ready(1, kD);
  EXPECT_EQ(*calls, (Calls{"start 0", "start 1", "start 2"}));
  reducer.finish();
  EXPECT_EQ(calls->size(), 3u);
  expect_every_buffer_holds(reducer, numbered_sum(2, 8));

  calls->clear();
  reducer.buffers_changed();
  reducer.begin(2);
  for (size_t r = 0; r < 2; ++r) {
    reducer.mark_ready(r, kA);
    reducer.mark_ready(r, kC);
    reducer.mark_ready(r, kD);
  }
  reducer.mark_ready(0, kB);  // bucket 1 never completes: bucket 2 waits for finish()
  EXPECT_EQ(*calls, Calls{"start 0"});
  reducer.finish();
  EXPECT_EQ(*calls, (Calls{"start 0", "run 1", "start 2"}));
}

// The launch order does not depend on which thread completes which bucket when: replicas on their own threads mark
// their gradients in scrambled orders, and the recorded launches are always buckets 0, 1, 2, ... .
TEST(GradientReducer, SpanningProcessesKeepsTheOrderWhateverTheThreadsDo) {
  std::vector<std::pair<std::string, Tensor>> named;  // eight parameters of one float: one bucket each
  for (int i = 0; i < 8; ++i) named.emplace_back("p" + std::to_string(i), Tensor::zeros({1}, Device::cpu(0)));
  for (auto& [name, parameter] : named) parameter.set_requires_grad(true);
  const GradientLayout layout(named, 4);
  ASSERT_EQ(layout.buckets().size(), 8u);
  const std::vector<Device> devices = {Device::cpu(0), Device::cpu(1), Device::cpu(2)};
  std::mutex mutex;
  std::vector<int64_t> launches;  // the start of each launched bucket's slice
  GradientCollective collective;
  collective.spans_processes = true;
  collective.start = [&](std::vector<Tensor>& slices, const std::vector<StreamMarker>& ready) {
    {
      const std::lock_guard<std::mutex> lock(mutex);
      launches.push_back(slices.front().storage_offset());
    }
    return comm::all_reduce_async(slices, ready);
  };
  GradientReducer reducer(layout, numbered_buffers(devices, 8), collective);
  std::vector<int64_t> expected;
  for (const GradientLayout::Bucket& bucket : layout.buckets()) expected.push_back(bucket.start);

  for (unsigned trial = 0; trial < 50; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    launches.clear();
    reducer.buffers_changed();
    reducer.begin(devices.size());
    std::vector<std::thread> threads;
    for (size_t r = 0; r < devices.size(); ++r) {
      threads.emplace_back([&reducer, r, trial] {
        std::vector<size_t> order = {0, 1, 2, 3, 4, 5, 6, 7};
        std::shuffle(order.begin(), order.end(), std::mt19937(trial * 7 + static_cast<unsigned>(r)));
        for (const size_t parameter : order) {
          reducer.mark_ready(r, parameter);
          std::this_thread::yield();
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    EXPECT_EQ(launches, expected) << "every bucket launched during backward, in index order";
    reducer.finish();
    expect_every_buffer_holds(reducer, numbered_sum(3, 8));
    for (size_t r = 0; r < devices.size(); ++r) {
      NoGradGuard no_grad;
      Tensor(reducer.buffers()[r]).copy_(numbered_buffers({devices[r]}, 8).front().mul_(static_cast<float>(r + 1)));
    }
  }
}

// A collective that spans processes runs with a single replica in the process: overlapped with two or more buckets,
// at the end with one, and in reduce().
TEST(GradientReducer, SpanningProcessesReducesASingleReplica) {
  const auto calls = std::make_shared<Calls>();
  const GradientLayout layout(four_parameters(Device::cpu(0)), kBucketBytes);
  GradientCollective collective = recording(calls, layout);
  collective.spans_processes = true;
  GradientReducer reducer(layout, numbered_buffers({Device::cpu(0)}, 8), collective);
  reducer.begin(1);
  reducer.mark_ready(0, kC);
  reducer.mark_ready(0, kD);
  EXPECT_EQ(*calls, Calls{"start 0"});
  reducer.mark_ready(0, kB);
  reducer.finish();
  EXPECT_EQ(*calls, (Calls{"start 0", "start 1", "run 2"}));
  reducer.buffers_changed();
  reducer.reduce();
  EXPECT_EQ(calls->size(), 6u);

  const GradientLayout one_bucket(four_parameters(Device::cpu(0)), 1024);
  calls->clear();
  GradientCollective single = recording(calls, one_bucket);
  single.spans_processes = true;
  GradientReducer whole(one_bucket, numbered_buffers({Device::cpu(0)}, 8), single);
  whole.begin(1);
  for (size_t i = 0; i < 4; ++i) whole.mark_ready(0, i);
  EXPECT_EQ(*calls, Calls{});
  whole.finish();
  EXPECT_EQ(*calls, Calls{"run 0"});
}

// Two processes of one job, simulated in one thread: each process's reducer has its own buffers, and the k-th
// collective of process A meets the k-th of process B (the same bucket, or the test fails) once B issues it. The
// reduction is written into both processes' slices then, so A's results appear once B's step has run.
class TwoProcesses {
 public:
  explicit TwoProcesses(comm::ReduceOp op) : op_(op) {}

  GradientCollective collective(size_t process) {
    GradientCollective collective;
    collective.spans_processes = true;
    collective.keeps_sum_on_replica0 = op_ == comm::ReduceOp::Average || process == 0;
    collective.start = [this, process](std::vector<Tensor>& slices, const std::vector<StreamMarker>&) {
      meet(process, slices);
      return comm::AllReduceWork();
    };
    collective.run = [this, process](std::vector<Tensor>& slices) { meet(process, slices); };
    return collective;
  }
  size_t collectives(size_t process) const { return issued_[process].size(); }

 private:
  void meet(size_t process, const std::vector<Tensor>& slices) {
    issued_[process].push_back(slices);
    const size_t k = issued_[process].size() - 1;
    if (issued_[1 - process].size() <= k) return;  // the other process has not issued its k-th collective yet
    const std::vector<Tensor>& mine = issued_[process][k];
    const std::vector<Tensor>& theirs = issued_[1 - process][k];
    ASSERT_EQ(mine.front().storage_offset(), theirs.front().storage_offset()) << "collective " << k;
    NoGradGuard no_grad;
    Tensor total = Tensor::zeros(mine.front().shape());
    for (const auto* side : {&mine, &theirs}) {
      for (const Tensor& slice : *side) total.add_(slice.to(Device::cpu(0)));
    }
    if (op_ == comm::ReduceOp::Average) total.mul_(0.5f);
    for (const auto* side : {&mine, &theirs}) {
      for (const Tensor& slice : *side) Tensor(slice).copy_(total.to(slice.device()));
    }
  }

  comm::ReduceOp op_;
  std::vector<std::vector<Tensor>> issued_[2];
};

// Note [Accumulating onto sums] across processes: a step that accumulates onto reduced buffers counts them once,
// for a sum (only rank 0's replica 0 keeps them) and for an average (every process's replica 0 keeps them).
TEST(GradientReducer, AccumulatingOntoReducedGradientsAcrossProcessesCountsThemOnce) {
  const std::vector<Device> devices = {Device::cpu(0), Device::cpu(1)};
  const GradientLayout layout(four_parameters(Device::cpu(0)), kBucketBytes);
  for (const comm::ReduceOp op : {comm::ReduceOp::Sum, comm::ReduceOp::Average}) {
    SCOPED_TRACE(op == comm::ReduceOp::Sum ? "sum" : "average");
    TwoProcesses job(op);
    // Process p's replica r holds (2p + r + 1) * (k + 1): over all four replicas, 10 * (k + 1).
    std::vector<std::unique_ptr<GradientReducer>> reducers;
    for (size_t p = 0; p < 2; ++p) {
      std::vector<Tensor> buffers = numbered_buffers(devices, 8);
      for (Tensor& buffer : buffers) buffer.add_(numbered_buffers({buffer.device()}, 8).front(), 2.0f * p);
      reducers.push_back(std::make_unique<GradientReducer>(layout, buffers, job.collective(p)));
    }
    const double divisor = op == comm::ReduceOp::Sum ? 1.0 : 2.0;
    for (auto& reducer : reducers) reducer->reduce();
    std::vector<double> reduced;
    for (int64_t k = 0; k < 8; ++k) reduced.push_back(10.0 * static_cast<double>(k + 1) / divisor);
    for (auto& reducer : reducers) expect_every_buffer_holds(*reducer, reduced);

    // A second step: every replica of both processes adds 1 to every gradient.
    for (auto& reducer : reducers) {
      reducer->begin(2);
      for (size_t r = 0; r < 2; ++r) {
        NoGradGuard no_grad;
        Tensor(reducer->buffers()[r]).add_(Tensor::ones({8}, devices[r]));
        for (size_t i = 0; i < 4; ++i) reducer->mark_ready(r, i);
      }
      reducer->finish();
    }
    EXPECT_EQ(job.collectives(0), 6u);
    EXPECT_EQ(job.collectives(1), 6u);
    std::vector<double> accumulated;
    for (const double value : reduced) accumulated.push_back(value + 4.0 / divisor);  // once, plus the new ones
    for (auto& reducer : reducers) expect_every_buffer_holds(*reducer, accumulated);
  }
}

}  // namespace
}  // namespace tandem::testing
