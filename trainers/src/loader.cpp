#include "tandem/trainers/loader.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>
#include <utility>

#include "tandem/core/error.h"
#include "tandem/core/splitmix64.h"

namespace tandem::trainers {

uint64_t ShuffleRng::next() {
  const uint64_t value = splitmix64(state_, 0);
  state_ += kSplitMix64Step;
  return value;
}

uint64_t ShuffleRng::below(uint64_t bound) {
  // Rejects the top partial range so that every value is equally likely.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  uint64_t value;
  do {
    value = next();
  } while (value >= limit);
  return value % bound;
}

std::vector<int64_t> epoch_order(int64_t rows, ShuffleRng* shuffle) {
  std::vector<int64_t> order(static_cast<size_t>(rows));
  std::iota(order.begin(), order.end(), 0);
  if (shuffle == nullptr) return order;
  for (int64_t i = rows - 1; i > 0; --i) {  // Fisher-Yates
    std::swap(order[i], order[shuffle->below(static_cast<uint64_t>(i) + 1)]);
  }
  return order;
}

int64_t count_batches(int64_t rows, int64_t batch_size, bool drop_last, std::string_view who) {
  TANDEM_CHECK(!drop_last || rows == 0 || rows >= batch_size, who, ": drop_last with ", rows, " rows and batch_size ",
               batch_size, " leaves no batch; expected a batch_size of at most ", rows, " or drop_last false");
  return rows / batch_size + (!drop_last && rows % batch_size != 0);
}

// Note [Loader workers]: a batch is a pure function of the epoch's order and number and its index (make_batch: the
// sampler's shard of the batch's rows, each device's chunk of them read with get_batch, then the transform, keyed by
// example and epoch: Note [Transforms keyed by example]), so who makes it and when does not
// change it: the batches, and their order, are the same for any number of workers. With workers, num_workers threads
// take the epoch's batch indices in order (next) and put each batch (or the exception that making it threw) into
// `ready`, at most kPrefetchPerWorker * num_workers batches being made or waiting at once (a bounded prefetch: a loop
// that stops consuming stops the workers too). batch(index) takes its batch from `ready`, waits for it while a worker
// makes it, or, for a batch no worker took (random access, a batch asked for again), makes it itself, dropping the
// waiting batches before it and moving the workers past it. begin_epoch() waits for the batches being made (they read
// the order) and drops the waiting ones before the order changes, so no batch of one epoch is ever given in another.
// Dataset::get_batch runs on several threads at once: it must not change shared state (dataset.h).
//
// Note [Pinned staging]: with pin_memory, the host chunk of a batch meant for a GPU is copied into page-locked memory
// (Tensor::pin_memory) by whoever makes the batch, a worker when there are workers, and batch() enqueues its copy to
// the device with Tensor::to(device, /*non_blocking=*/true): the host does not wait for the copy and goes on to the
// next batch while the GPU still works. The page-locked blocks come from the caching pinned allocator, which hands
// a block out again only once the copies that read it have run (Note [Pinned block reuse]), so an epoch allocates no
// new page-locked memory after its first batches, and no block is overwritten while a copy may still read it. The
// copies to the devices are made on the caller's thread, in batch order: device memory holds only the batches the
// caller has taken.
namespace {

constexpr int kMaxWorkers = 64;
constexpr size_t kPrefetchPerWorker = 2;

bool is_default(const DistributedSampler& sampler) {
  return sampler.processes() == 1 && sampler.devices_per_process() == 1;
}

// What cuts every batch over processes and devices: the options' sampler, or, with the default one, comm::scatter's
// rule over the devices (a sampler of one process with that many devices cuts a batch exactly so).
DistributedSampler splitter_for(const DataLoaderOptions& options) {
  const auto devices = static_cast<int64_t>(options.devices.size());
  const DistributedSampler& sampler = options.sampler;
  if (is_default(sampler)) return DistributedSampler(1, std::max<int64_t>(devices, 1), 0);
  TANDEM_CHECK(devices == 0 || sampler.devices_per_process() == devices, "DataLoader: the sampler has ",
               sampler.devices_per_process(), " devices per process but options.devices lists ", devices,
               "; expected as many");
  return sampler;
}

// The chunk for `device` in page-locked memory when it is to be copied asynchronously (Note [Pinned staging]).
Tensor staged_for(Tensor chunk, const Device& device, bool pin_memory) {
  return pin_memory && device.is_cuda() ? chunk.pin_memory() : chunk;
}

}  // namespace

int64_t Batch::rows() const { return std::accumulate(device_rows.begin(), device_rows.end(), int64_t{0}); }

struct DataLoader::State {
  const Dataset* data;
  int64_t batch_size;
  bool shuffle;
  bool pin_memory;
  std::vector<Device> devices;
  DistributedSampler sampler;   // as given
  DistributedSampler splitter;  // cuts each batch over processes and devices (splitter_for)
  int64_t num_batches = 0;
  ShuffleRng rng;
  std::vector<int64_t> order;
  std::shared_ptr<const BatchTransform> transform;
  int64_t epoch = -1;

  // The examples order[first, first + count), count >= 1, their data transformed when there is a transform.
  Example read(int64_t first, int64_t count) const {
    const auto begin = order.begin() + first;
    const std::vector<int64_t> indices(begin, begin + count);
    Example examples = data->get_batch(indices);
    if (transform) examples.data = transform->apply(examples.data, indices, epoch);
    return examples;
  }

  // Batch `index` on the host: its inputs and labels the chunks for the devices, pinned for GPUs with pin_memory
  // (Note [Pinned staging]); batch() moves them to their devices.
  Batch make_batch(int64_t index) const {
    const int64_t global_rows = std::min(batch_size, data->size() - index * batch_size);
    Shard shard = splitter.shard(global_rows);
    int64_t start = index * batch_size + shard.begin;
    Batch batch;
    if (devices.empty()) {
      Example whole;
      if (shard.rows() == 0) {  // no rows of this batch for this process: the shapes of one example's batch, no rows
        const Example one = data->get_batch({order[0]});
        whole = {one.data.narrow(0, 0, 0), one.target.narrow(0, 0, 0)};
      } else {
        whole = read(start, shard.rows());
      }
      const bool pin = pin_memory && cuda_device_count() > 0;
      batch.features = pin ? whole.data.pin_memory() : std::move(whole.data);
      batch.targets = pin ? whole.target.pin_memory() : std::move(whole.target);
    } else {
      for (size_t d = 0; d < shard.device_rows.size(); ++d) {
        Example chunk = read(start, shard.device_rows[d]);
        batch.inputs.push_back(staged_for(std::move(chunk.data), devices[d], pin_memory));
        batch.labels.push_back(staged_for(std::move(chunk.target), devices[d], pin_memory));
        start += shard.device_rows[d];
      }
    }
    batch.device_rows = std::move(shard.device_rows);
    batch.global_rows = global_rows;
    return batch;
  }

  // The host chunks of `batch` on their devices: asynchronous copies from pinned memory, or synchronous ones.
  Batch placed(Batch batch) const {
    for (size_t d = 0; d < batch.inputs.size(); ++d) {
      batch.inputs[d] = batch.inputs[d].to(devices[d], /*non_blocking=*/true);
      batch.labels[d] = batch.labels[d].to(devices[d], /*non_blocking=*/true);
    }
    return batch;
  }
};

struct DataLoader::Prefetch {
  struct Made {
    Batch batch;
    std::exception_ptr error;
  };

  Prefetch(const State& state, int workers) : state(state), capacity(kPrefetchPerWorker * workers) {
    next = state.num_batches;  // idle until begin_epoch()
    for (int w = 0; w < workers; ++w) threads.emplace_back([this] { work(); });
  }
  ~Prefetch() {
    {
      const std::lock_guard<std::mutex> lock(mutex);
      stop = true;
    }
    changed.notify_all();
    for (std::thread& thread : threads) thread.join();
  }

  void work() {
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      changed.wait(lock,
                   [this] { return stop || (next < state.num_batches && making.size() + ready.size() < capacity); });
      if (stop) return;
      const int64_t index = next++;
      making.insert(index);
      lock.unlock();
      Made made;
      try {
        made.batch = state.make_batch(index);
      } catch (...) {
        made.error = std::current_exception();
      }
      lock.lock();
      making.erase(index);
      ready.emplace(index, std::move(made));
      changed.notify_all();
    }
  }

  // Before the order changes: no batch is being made, none waits, and the workers are idle.
  void pause() {
    std::unique_lock<std::mutex> lock(mutex);
    next = state.num_batches;
    changed.wait(lock, [this] { return making.empty(); });
    ready.clear();
    changed.notify_all();
  }

  void start() {
    {
      const std::lock_guard<std::mutex> lock(mutex);
      next = 0;
    }
    changed.notify_all();
  }

  Batch take(int64_t index) {
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      const auto found = ready.find(index);
      if (found != ready.end()) {
        Made made = std::move(found->second);
        ready.erase(found);
        changed.notify_all();
        if (made.error) std::rethrow_exception(made.error);
        return std::move(made.batch);
      }
      if (making.count(index) == 0) break;
      changed.wait(lock);
    }
    // No worker has it: make it here, and move the workers past it.
    ready.erase(ready.begin(), ready.lower_bound(index));
    next = std::max(next, index + 1);
    changed.notify_all();
    lock.unlock();
    return state.make_batch(index);
  }

  const State& state;
  const size_t capacity;
  std::mutex mutex;
  std::condition_variable changed;
  int64_t next = 0;          // the next batch index a worker takes
  std::set<int64_t> making;  // being made by a worker
  std::map<int64_t, Made> ready;
  bool stop = false;
  std::vector<std::thread> threads;
};

DataLoader::DataLoader(const Dataset& data, DataLoaderOptions options) {
  TANDEM_CHECK(options.batch_size >= 1, "DataLoader: batch_size is ", options.batch_size, " but expected at least 1");
  TANDEM_CHECK(data.size() >= 1, "DataLoader: the data set has no examples");
  TANDEM_CHECK(options.num_workers >= 0 && options.num_workers <= kMaxWorkers, "DataLoader: num_workers is ",
               options.num_workers, " but expected 0 to ", kMaxWorkers);
  for (const Device& device : options.devices) check_device_available(device, "DataLoader");
  check_distinct(options.devices, "DataLoader", "options.devices entries");
  DistributedSampler splitter = splitter_for(options);
  state_ = std::make_unique<State>(State{&data,
                                         options.batch_size,
                                         options.shuffle,
                                         options.pin_memory,
                                         std::move(options.devices),
                                         options.sampler,
                                         splitter,
                                         0,
                                         ShuffleRng(options.seed),
                                         {},
                                         std::move(options.transform)});
  state_->num_batches = count_batches(data.size(), options.batch_size, options.drop_last, "DataLoader");
  state_->order = epoch_order(data.size(), nullptr);
  if (options.num_workers > 0) prefetch_ = std::make_unique<Prefetch>(*state_, options.num_workers);
}

DataLoader::DataLoader(const Dataset& data, int64_t batch_size, bool shuffle, uint64_t seed, DistributedSampler sampler,
                       bool drop_last)
    : DataLoader(
          data,
          DataLoaderOptions{
              .batch_size = batch_size, .shuffle = shuffle, .seed = seed, .drop_last = drop_last, .sampler = sampler}) {
}

DataLoader::~DataLoader() = default;

DataLoader::DataLoader(DataLoader&&) noexcept = default;

DataLoader& DataLoader::operator=(DataLoader&& other) noexcept {
  prefetch_.reset();  // its workers read state_
  state_ = std::move(other.state_);
  prefetch_ = std::move(other.prefetch_);
  return *this;
}

void DataLoader::begin_epoch() {
  if (prefetch_) prefetch_->pause();
  state_->order = epoch_order(state_->data->size(), state_->shuffle ? &state_->rng : nullptr);
  ++state_->epoch;
  if (prefetch_) prefetch_->start();
}

int64_t DataLoader::num_batches() const { return state_->num_batches; }
const std::vector<int64_t>& DataLoader::order() const { return state_->order; }
int64_t DataLoader::batch_size() const { return state_->batch_size; }
const DistributedSampler& DataLoader::sampler() const { return state_->sampler; }
int DataLoader::num_workers() const { return prefetch_ ? static_cast<int>(prefetch_->threads.size()) : 0; }
const std::vector<Device>& DataLoader::devices() const { return state_->devices; }
const Dataset& DataLoader::dataset() const { return *state_->data; }
uint64_t DataLoader::shuffle_state() const { return state_->rng.state(); }

void DataLoader::set_shuffle_state(uint64_t state) {
  if (prefetch_) prefetch_->pause();  // idle until the next begin_epoch()
  state_->rng = ShuffleRng(state);
}

int64_t DataLoader::epoch() const { return state_->epoch; }

void DataLoader::set_epoch(int64_t epoch) {
  TANDEM_CHECK(epoch >= 0, "DataLoader::set_epoch: epoch is ", epoch, " but expected at least 0");
  if (prefetch_) prefetch_->pause();  // idle until the next begin_epoch()
  state_->epoch = epoch - 1;
}

Batch DataLoader::batch(int64_t index) const {
  TANDEM_CHECK(index >= 0 && index < num_batches(), "DataLoader::batch: index ", index, " but an epoch has ",
               num_batches(), " batches");
  return state_->placed(prefetch_ ? prefetch_->take(index) : state_->make_batch(index));
}

DataLoader::Iterator::Iterator(const DataLoader* loader, int64_t index) : loader_(loader), index_(index) {
  if (index_ < loader_->num_batches()) batch_ = loader_->batch(index_);
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  ++index_;
  batch_ = index_ < loader_->num_batches() ? loader_->batch(index_) : Batch{};
  return *this;
}

DataLoader::Iterator DataLoader::begin() {
  begin_epoch();
  return Iterator(this, 0);
}

DataLoader::Iterator DataLoader::end() const { return Iterator(this, num_batches()); }

}  // namespace tandem::trainers
