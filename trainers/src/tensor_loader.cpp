#include "tandem/trainers/tensor_loader.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <utility>

#include "tandem/core/error.h"

namespace tandem::trainers {
namespace {

constexpr const char* kTensorDataLoader = "TensorDataLoader";

bool is_default(const DistributedSampler& sampler) {
  return sampler.processes() == 1 && sampler.devices_per_process() == 1;
}

// What cuts every batch over processes and devices: the options' sampler, or, with the default one, comm::scatter's
// rule over the devices (a sampler of one process with that many devices cuts a batch exactly so).
DistributedSampler splitter_for(const TensorDataLoaderOptions& options) {
  const auto devices = static_cast<int64_t>(options.devices.size());
  const DistributedSampler& sampler = options.sampler;
  if (options.shard) {
    TANDEM_CHECK(is_default(sampler), kTensorDataLoader, ": options.shard and a DistributedSampler of ",
                 sampler.processes(), " processes with ", sampler.devices_per_process(),
                 " devices each were both given; expected one of ",
                 "them (the hook picks this process's rows of each epoch, the sampler cuts every global batch)");
  }
  if (is_default(sampler)) return DistributedSampler(1, std::max<int64_t>(devices, 1), 0);
  TANDEM_CHECK(devices == 0 || sampler.devices_per_process() == devices, kTensorDataLoader, ": the sampler has ",
               sampler.devices_per_process(), " devices per process but options.devices lists ", devices,
               "; expected as many");
  return sampler;
}

int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }

}  // namespace

int64_t TensorBatch::rows() const { return std::accumulate(device_rows.begin(), device_rows.end(), int64_t{0}); }

const std::vector<Tensor>& TensorBatch::tensors() const& {
  TANDEM_CHECK(parts.size() == 1, "TensorBatch::tensors: the batch has ", parts.size(),
               " parts (one per device that gets rows) but expected one; use parts[d]");
  return parts.front();
}

std::vector<Tensor> TensorBatch::tensors() && {
  (void)std::as_const(*this).tensors();  // the same check
  return std::move(parts.front());
}

TensorDataLoader::TensorDataLoader(TensorDataset data, TensorDataLoaderOptions options)
    : data_(std::move(data)), options_(std::move(options)), rng_(options_.seed) {
  const int64_t batch_size = options_.batch_size;
  TANDEM_CHECK(batch_size >= 1, kTensorDataLoader, ": batch_size is ", batch_size, " but expected at least 1");
  for (const Device& device : options_.devices) check_device_available(device, kTensorDataLoader);
  check_distinct(options_.devices, kTensorDataLoader, "options.devices entries");
  splitter_ = splitter_for(options_);
  order_ = epoch_order(data_.rows(), nullptr);
  if (!options_.shard) num_batches_ = count_batches(data_.rows(), batch_size, options_.drop_last, kTensorDataLoader);

  // The largest chunk a device can get: of a global batch of at most batch_size rows (at most every row of the data
  // set, unless a shard hook repeats rows).
  const int64_t batch_rows = options_.shard ? batch_size : std::min(batch_size, data_.rows());
  const int64_t chunk_rows = ceil_div(batch_rows, splitter_.world_devices());
  staging_.resize(options_.devices.size());
  next_slot_.assign(options_.devices.size(), 0);
  for (size_t d = 0; d < options_.devices.size(); ++d) {
    if (!options_.pin_memory || !options_.devices[d].is_cuda()) continue;  // Note [Pinned staging]
    staging_[d].resize(kStagingSlots);
    for (StagingSlot& slot : staging_[d]) {
      for (const Tensor& tensor : data_.tensors()) {
        Shape shape = tensor.shape();
        shape[0] = chunk_rows;
        slot.buffers.push_back(Tensor::empty_pinned(shape, tensor.dtype()));
      }
    }
  }
}

void TensorDataLoader::begin_epoch() {
  std::vector<int64_t> order = epoch_order(data_.rows(), options_.shuffle ? &rng_ : nullptr);
  if (options_.shard) {
    std::vector<int64_t> picked = options_.shard(epoch_, order);
    for (size_t i = 0; i < picked.size(); ++i) {
      TANDEM_CHECK(picked[i] >= 0 && picked[i] < data_.rows(), "TensorDataLoader::begin_epoch: the shard hook gave ",
                   "row ", picked[i], " at position ", i, " for epoch ", epoch_, " but the data set has ", data_.rows(),
                   " rows");
    }
    num_batches_ =
        count_batches(static_cast<int64_t>(picked.size()), options_.batch_size, options_.drop_last,
                      "TensorDataLoader::begin_epoch: the shard hook's rows of epoch " + std::to_string(epoch_));
    picked_ = std::move(picked);
  }
  order_ = std::move(order);
  ++epoch_;
}

void TensorDataLoader::set_epoch(int64_t epoch) {
  TANDEM_CHECK(epoch >= 0, "TensorDataLoader::set_epoch: epoch is ", epoch, " but expected >= 0");
  epoch_ = epoch;
}

bool TensorDataLoader::pins_host_batches() const { return options_.pin_memory && cuda_device_count() > 0; }

Tensor TensorDataLoader::gather_rows(size_t t, int64_t first, int64_t count, Device device, StagingSlot* slot) const {
  const Tensor& source = data_.tensors()[t];
  Shape shape = source.shape();
  shape[0] = count;
  Tensor host;
  if (slot != nullptr) {
    host = slot->buffers[t].narrow(0, 0, count);
  } else if (device.is_cpu() && options_.devices.empty() && pins_host_batches()) {
    host = Tensor::empty_pinned(shape, source.dtype());
  } else {
    host = Tensor::empty(shape, source.dtype(), device.is_cpu() ? device : Device::cpu());
  }
  // Rows are whole and contiguous in the data set's tensors, whatever the dtype: copied as bytes.
  const size_t row_bytes =
      static_cast<size_t>(source.numel() / std::max<int64_t>(source.size(0), 1)) * element_size(source.dtype());
  const auto* from = static_cast<const char*>(source.data_ptr());
  auto* to = static_cast<char*>(host.mutable_data_ptr());
  const std::vector<int64_t>& rows = indices();
  for (int64_t r = 0; r < count; ++r) {
    std::memcpy(to + static_cast<size_t>(r) * row_bytes, from + static_cast<size_t>(rows[first + r]) * row_bytes,
                row_bytes);
  }
  if (device.is_cpu()) return host;
  return host.to(device, /*non_blocking=*/true);  // asynchronous from pinned staging, synchronous from pageable
}

TensorBatch TensorDataLoader::batch(int64_t index) {
  TANDEM_CHECK(index >= 0 && index < num_batches_, "TensorDataLoader::batch: index ", index, " but the epoch has ",
               num_batches_, " batches");
  const int64_t first = index * options_.batch_size;
  const int64_t global_rows = std::min(options_.batch_size, static_cast<int64_t>(indices().size()) - first);
  Shard shard = splitter_.shard(global_rows);
  TensorBatch batch;
  batch.global_rows = global_rows;
  int64_t start = first + shard.begin;
  if (options_.devices.empty()) {
    std::vector<Tensor>& part = batch.parts.emplace_back();
    for (size_t t = 0; t < data_.tensors().size(); ++t)
      part.push_back(gather_rows(t, start, shard.rows(), Device::cpu(), nullptr));
  } else {
    for (size_t d = 0; d < shard.device_rows.size(); ++d) {
      const Device device = options_.devices[d];
      StagingSlot* slot = nullptr;
      if (!staging_[d].empty()) {
        slot = &staging_[d][static_cast<size_t>(next_slot_[d])];
        next_slot_[d] = (next_slot_[d] + 1) % kStagingSlots;
        slot->copied.synchronize();  // Note [Pinned staging]: the slot's last copy has read it
      }
      std::vector<Tensor>& part = batch.parts.emplace_back();
      for (size_t t = 0; t < data_.tensors().size(); ++t) {
        part.push_back(gather_rows(t, start, shard.device_rows[d], device, slot));
      }
      if (slot != nullptr) slot->copied = StreamMarker::record(device);
      start += shard.device_rows[d];
    }
  }
  batch.device_rows = std::move(shard.device_rows);
  return batch;
}

TensorDataLoader::Iterator::Iterator(TensorDataLoader* loader, int64_t index) : loader_(loader), index_(index) {
  if (index_ < loader_->num_batches()) batch_ = loader_->batch(index_);
}

TensorDataLoader::Iterator& TensorDataLoader::Iterator::operator++() {
  ++index_;
  batch_ = index_ < loader_->num_batches() ? loader_->batch(index_) : TensorBatch{};
  return *this;
}

TensorDataLoader::Iterator TensorDataLoader::begin() {
  begin_epoch();
  return Iterator(this, 0);
}

TensorDataLoader::Iterator TensorDataLoader::end() { return Iterator(this, num_batches_); }

}  // namespace tandem::trainers
