#include "tandem/parallel/gradient_reducer.h"

#include <algorithm>
#include <mutex>
#include <utility>

#include "device_checks.h"
#include "tandem/core/error.h"
#include "tandem/core/grad_mode.h"

namespace tandem::parallel {

namespace {
constexpr const char* kGradientReducer = "parallel::GradientReducer";
}  // namespace

// What an overlapped step tracks while the replicas run (Note [Overlapped gradient reduction] in
// gradient_reducer.h).
struct GradientReducer::Step {
  Step(size_t buckets, size_t replicas, BucketStarted started)
      : started(std::move(started)),
        missing(buckets, std::vector<size_t>(replicas, 0)),
        replicas_missing(buckets),
        ready(buckets, std::vector<StreamMarker>(replicas)),
        works(buckets),
        launched(buckets, 0),
        completed(buckets, 0) {}

  const BucketStarted started;  // begin()'s callback, called by launch_bucket
  // Touched only by the thread running that replica's backward:
  std::vector<std::vector<size_t>> missing;  // [bucket][replica]: gradients of the bucket still to come
  // Shared by the replicas' threads: the thread that takes replicas_missing[b] to zero launches bucket b, after
  // every other replica stored its marker in ready[b] (acquire-release on the counter orders those stores).
  std::vector<std::atomic<size_t>> replicas_missing;  // [bucket]: replicas whose part of the bucket is not final
  std::vector<std::vector<StreamMarker>> ready;       // [bucket][replica]: where that part became final
  // Written by the launching thread, read by finish() once every replica has finished:
  std::vector<comm::AllReduceWork> works;  // [bucket]
  std::vector<char> launched;              // [bucket]
  // Note [Fixed bucket order] (a collective that spans processes): guarded by `order`.
  std::mutex order;
  size_t next_to_launch = 0;    // every bucket before it has been launched
  std::vector<char> completed;  // [bucket]: complete on every replica
};

GradientReducer::GradientReducer(GradientLayout layout, std::vector<Tensor> buffers, GradientCollective collective)
    : layout_(std::move(layout)), buffers_(std::move(buffers)), collective_(std::move(collective)) {
  TANDEM_CHECK(!buffers_.empty(), kGradientReducer, ": got no buffers");
  TANDEM_CHECK(collective_.start && collective_.run, kGradientReducer, ": the collective's ",
               collective_.start ? "run" : "start", " function is empty");
  TANDEM_CHECK(!staged() || collective_.scatter_devices > 0, kGradientReducer,
               ": shards_gradients needs a reduce-scatter (scatter_devices > 0)");
  const auto world = static_cast<int64_t>(std::max<size_t>(collective_.scatter_devices, 1));
  const int64_t expected = staged() ? layout_.numel() / world : layout_.numel();
  std::vector<Device> devices;
  for (size_t r = 0; r < buffers_.size(); ++r) {
    const Tensor& buffer = buffers_[r];
    TANDEM_CHECK(buffer.defined(), kGradientReducer, ": buffer ", r, " is undefined");
    TANDEM_CHECK(buffer.dim() == 1 && buffer.numel() == expected && buffer.is_contiguous(), kGradientReducer,
                 ": buffer ", r, " has shape ", to_string(buffer.shape()), " and strides ", to_string(buffer.strides()),
                 " but expected a contiguous [", expected, "]");
    devices.push_back(buffer.device());
  }
  check_distinct(devices, kGradientReducer);
  int64_t shard_offset = 0;
  for (size_t b = 0; b < layout_.buckets().size(); ++b) {
    bucket_slices_.emplace_back(buffers_.size());
    if (staged()) {
      shard_offsets_.push_back(shard_offset);
      shard_offset += layout_.buckets()[b].length / world;
      continue;
    }
    for (size_t r = 0; r < buffers_.size(); ++r) bucket_slices_.back()[r] = layout_.bucket_view(buffers_[r], b);
  }
  hooks_.resize(buffers_.size());
  parameters_.resize(buffers_.size());
  arrived_.assign(buffers_.size(), std::vector<char>(layout_.parameter_count(), 0));
}

GradientReducer::~GradientReducer() {
  for (const std::vector<Hook>& hooks : hooks_) {
    for (const Hook& hook : hooks) hook.parameter.remove_post_accumulate_grad_hook(hook.handle);
  }
}

void GradientReducer::install_hooks(size_t replica, const std::vector<Tensor>& parameters) {
  TANDEM_CHECK(replica < size(), kGradientReducer, "::install_hooks: replica ", replica, " but there are ", size());
  TANDEM_CHECK(hooks_[replica].empty(), kGradientReducer, "::install_hooks: replica ", replica,
               " has its hooks already");
  TANDEM_CHECK(parameters.size() == layout_.parameter_count(), kGradientReducer, "::install_hooks: got ",
               parameters.size(), " parameters for replica ", replica, " but the layout has ",
               layout_.parameter_count());
  const Device device = buffers_[replica].device();
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (!layout_.has_place(i)) continue;
    TANDEM_CHECK(parameters[i].defined() && parameters[i].device() == device, kGradientReducer,
                 "::install_hooks: parameter '", layout_.name(i), "' of replica ", replica, " is ",
                 parameters[i].defined() ? "on " + parameters[i].device().str() : std::string("undefined"),
                 " but the replica's buffer is on ", device);
  }
  parameters_[replica] = parameters;
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (!layout_.has_place(i)) continue;
    const uint64_t handle = parameters[i].register_post_accumulate_grad_hook([this, replica, i](const Tensor& leaf) {
      if (staged()) stage(replica, i, leaf);
      mark_ready(replica, i);
    });
    hooks_[replica].push_back({parameters[i], handle});
  }
}

// Note [Accumulating onto sums]: backward adds to the gradient buffers. When gradients accumulate onto buffers that
// hold reduced values (no zeroing since the last reduction: gradients accumulated over several batches), every
// buffer holds the same value S, and reducing them all again would count S once per buffer. So before the new
// gradients arrive, all buffers but those that keep S are cleared, and which keep it depends on the reduction:
//   - a sum over the replicas of one process: replica 0 keeps S, and the next sum gives S plus every replica's new
//     gradients, as one device accumulating over the batches would;
//   - a sum over every replica of P processes: only replica 0 of rank 0 keeps S, every buffer of the other
//     processes is cleared, and the sum gives S plus the new gradients again;
//   - an average over P processes (the sum over every replica divided by P): replica 0 of every process keeps S,
//     so the result is (P * S + the sum of the new gradients) / P = S + their average.
// GradientCollective::keeps_sum_on_replica0 says whether this process's replica 0 keeps S (true in one process).
//   - staged buckets (Note [Staged gradient buckets] in gradient_reducer.h) hold no sums: each reduction adds only
//     the gradients staged since the last one into the shards, which keep what they held.
void GradientReducer::prepare_to_accumulate() {
  TANDEM_CHECK(!open_, kGradientReducer, "::prepare_to_accumulate: a step is open; finish() or abandon() it first");
  if (staged()) {
    summed_ = false;
    return;
  }
  TANDEM_CHECK(!summed_ || collective_.scatter_devices == 0, kGradientReducer,
               ": the gradients were reduce-scattered (DistributedOptions::zero_stage >= 1), so each device holds ",
               "only its chunk of their reduction, which new gradients cannot accumulate onto; zero the gradients ",
               "(the sharded optimizer's zero_grad()) before the next backward");
  if (summed_) {
    NoGradGuard no_grad;
    for (size_t r = collective_.keeps_sum_on_replica0 ? 1 : 0; r < buffers_.size(); ++r) buffers_[r].zero_();
  }
  summed_ = false;
}

void GradientReducer::begin(size_t active, BucketStarted started, FirstGradient first_gradient) {
  TANDEM_CHECK(!open_, kGradientReducer, "::begin: the previous step is still open; finish() or abandon() it first");
  TANDEM_CHECK(active <= size(), kGradientReducer, "::begin: got ", active, " active replicas but there are ", size());
  prepare_to_accumulate();
  for (std::vector<char>& row : arrived_) std::fill(row.begin(), row.end(), 0);
  received_.store(false, std::memory_order_relaxed);
  first_gradient_ = std::move(first_gradient);
  active_ = active;
  open_ = true;
  if (staged() && !bucket_slices_.empty()) {
    for (size_t r = 0; r < active; ++r) stage_ahead(r, 0);  // Note [Staged gradient buckets]
  }
  // A single bucket cannot overlap anything: its all-reduce can only start once every backward has finished. It is
  // summed by finish(), without the per-gradient bookkeeping of an overlapped step. Nor is there anything to
  // overlap with one replica in one process.
  if (layout_.buckets().size() < 2 || nothing_to_reduce()) return;

  // Replica r's part of every bucket is complete once each of its parameters in the bucket got its gradient; a
  // replica without an input this step has its part complete from the start, with the gradients it holds.
  const size_t buckets = layout_.buckets().size();
  auto step = std::make_unique<Step>(buckets, size(), std::move(started));
  for (size_t b = 0; b < buckets; ++b) {
    for (size_t r = 0; r < active; ++r) step->missing[b][r] = layout_.buckets()[b].parameters;
    step->replicas_missing[b].store(active, std::memory_order_relaxed);
  }
  for (size_t r = active; r < size(); ++r) {
    const StreamMarker now = StreamMarker::record(buffers_[r].device());
    for (size_t b = 0; b < buckets; ++b) step->ready[b][r] = now;
  }
  step_ = std::move(step);  // the workers see it: the caller hands them their backward after this
}

void GradientReducer::mark_ready(size_t replica, size_t parameter) {
  TANDEM_CHECK(replica < size() && parameter < layout_.parameter_count(), kGradientReducer, "::mark_ready: replica ",
               replica, ", parameter ", parameter, " but there are ", size(), " replicas and ",
               layout_.parameter_count(), " parameters");
  TANDEM_CHECK(layout_.has_place(parameter), kGradientReducer, "::mark_ready: parameter '", layout_.name(parameter),
               "' has no place in the buffers (it does not require grad)");
  unreduced_.store(true, std::memory_order_release);
  if (open_) {
    // Only the step's first gradient calls first_gradient_ (several replicas' threads may race to it).
    if (!received_.exchange(true, std::memory_order_acq_rel) && first_gradient_) first_gradient_();
  }
  Step* step = step_.get();
  if (step == nullptr) {  // outside an overlapped step: the buffers hold new local gradients
    if (open_) arrived_[replica][parameter] = 1;
    summed_ = false;
    return;
  }
  TANDEM_CHECK(!arrived_[replica][parameter], kGradientReducer, "::mark_ready: parameter '", layout_.name(parameter),
               "' of replica ", replica, " received a second gradient in one step, but its bucket is summed once; ",
               "run one backward per replica");
  arrived_[replica][parameter] = 1;
  const size_t bucket = layout_.bucket_of(parameter);
  if (--step->missing[bucket][replica] > 0) return;
  step->ready[bucket][replica] = StreamMarker::record(buffers_[replica].device());
  if (step->replicas_missing[bucket].fetch_sub(1, std::memory_order_acq_rel) == 1) bucket_completed(*step, bucket);
}

// Runs on the thread that completed `bucket` on the last replica.
void GradientReducer::bucket_completed(Step& step, size_t bucket) {
  if (!collective_.spans_processes) {
    launch_bucket(step, bucket);
    return;
  }
  // Note [Fixed bucket order]: launch it once every bucket before it has been, and the completed ones after it.
  std::lock_guard<std::mutex> lock(step.order);
  step.completed[bucket] = 1;
  while (step.next_to_launch < step.completed.size() && step.completed[step.next_to_launch]) {
    launch_bucket(step, step.next_to_launch++);
  }
}

void GradientReducer::launch_bucket(Step& step, size_t bucket) {
  if (staged()) {
    reduce_bucket(bucket);
  } else {
    std::vector<Tensor> slices = bucket_slices_[bucket];
    step.works[bucket] = collective_.start(slices, step.ready[bucket]);
  }
  step.launched[bucket] = 1;
  if (step.started) step.started(bucket);
}

void GradientReducer::finish() {
  TANDEM_CHECK(open_, kGradientReducer, "::finish: no step is open; call begin() first");
  open_ = false;
  if (step_ == nullptr) {
    reduce();
    return;
  }
  try {
    finish_overlapped_step();
  } catch (...) {
    abandon();
    throw;
  }
  summed_ = true;
  unreduced_.store(false, std::memory_order_release);
}

std::vector<size_t> GradientReducer::missing_gradients() const {
  std::vector<size_t> missing;
  for (size_t i = 0; i < layout_.parameter_count(); ++i) {
    if (!layout_.has_place(i)) continue;
    for (size_t r = 0; r < active_; ++r) {
      if (!arrived_[r][i]) {
        missing.push_back(i);
        break;
      }
    }
  }
  return missing;
}

// Runs once every replica has finished: sums the buckets that never became complete (a parameter without gradient
// this step) and joins every bucket's all-reduce into the compute streams (device-side waits; the host goes on).
void GradientReducer::finish_overlapped_step() {
  for (size_t b = 0; b < bucket_slices_.size(); ++b) {
    if (step_->launched[b]) continue;
    if (collective_.spans_processes && step_->replicas_missing[b].load(std::memory_order_acquire) == 0) {
      launch_bucket(*step_, b);  // complete, waiting for an earlier bucket (Note [Fixed bucket order])
      continue;
    }
    reduce_bucket(b);
  }
  for (comm::AllReduceWork& work : step_->works) work.wait();
  step_.reset();
}

void GradientReducer::abandon() {
  step_.reset();  // joins the all-reduces already started (AllReduceWork's destructor)
  open_ = false;
}

void GradientReducer::reduce() {
  TANDEM_CHECK(!open_, kGradientReducer, "::reduce: a step is open; finish() sums its gradients");
  if (summed_ || nothing_to_reduce()) {
    unreduced_.store(false, std::memory_order_release);
    return;
  }
  for (size_t b = 0; b < bucket_slices_.size(); ++b) reduce_bucket(b);
  summed_ = true;
  unreduced_.store(false, std::memory_order_release);
}

// One bucket's collective, with `run`. Staged: over the staging tensors (zeros for a replica that staged nothing),
// whose owned chunks are then added into the shards, and which are released.
void GradientReducer::reduce_bucket(size_t bucket) {
  if (staged()) {
    for (size_t r = 0; r < size(); ++r) (void)staging(r, bucket);
  }
  std::vector<Tensor> slices = bucket_slices_[bucket];
  collective_.run(slices);
  if (!staged()) return;
  NoGradGuard no_grad;
  const int64_t chunk = owned_gradients(0, bucket).numel();
  for (size_t r = 0; r < size(); ++r) {
    owned_gradients(r, bucket).add_(slices[r].narrow(0, owned_offset(r, bucket), chunk));
  }
  drop_staging(bucket);
}

// Replica `replica`'s staging tensor of `bucket`, allocated (zeroed) when it has none.
Tensor& GradientReducer::staging(size_t replica, size_t bucket) {
  Tensor& staging = bucket_slices_[bucket][replica];
  if (!staging.defined()) staging = Tensor::zeros({layout_.buckets()[bucket].length}, buffers_[replica].device());
  return staging;
}

// Note [Staged gradient buckets]: the bucket's staging tensor on the replica's device, with its views installed as
// .grad on the parameters that hold none, for backward to accumulate into. On the thread running that replica's
// backward (or before it starts).
void GradientReducer::stage_ahead(size_t replica, size_t bucket) {
  if (bucket_slices_[bucket][replica].defined() || parameters_[replica].empty()) return;
  const Tensor& tensor = staging(replica, bucket);
  const int64_t start = layout_.buckets()[bucket].start;
  for (const size_t i : layout_.bucket_parameters(bucket)) {
    const Tensor& parameter = parameters_[replica][i];
    if (parameter.impl()->grad != nullptr) continue;
    parameter.set_grad(tensor.narrow(0, layout_.offset(i) - start, parameter.numel()).view(parameter.shape()));
  }
}

// Drops the bucket's staging tensors and the views of them that its parameters hold as .grad.
void GradientReducer::drop_staging(size_t bucket) {
  for (size_t r = 0; r < size(); ++r) {
    Tensor& tensor = bucket_slices_[bucket][r];
    if (!tensor.defined()) continue;
    for (const size_t i : layout_.bucket_parameters(bucket)) {
      if (parameters_[r].empty()) break;
      const Tensor& parameter = parameters_[r][i];
      const TensorImpl* grad = parameter.impl()->grad.get();
      if (grad != nullptr && grad->storage == tensor.impl()->storage) parameter.set_grad(Tensor());
    }
    tensor = Tensor();
  }
}

// Note [Staged gradient buckets] in gradient_reducer.h: runs in the hook, on the thread running replica `replica`'s
// backward, which alone touches that replica's staging tensors until the bucket completes. A second gradient in one
// overlapped step (whose bucket may be reduced already) is left for mark_ready to refuse.
void GradientReducer::stage(size_t replica, size_t parameter, const Tensor& leaf) {
  if (step_ != nullptr && arrived_[replica][parameter]) return;
  NoGradGuard no_grad;
  const size_t bucket = layout_.bucket_of(parameter);
  // The next bucket, unless this replica has sent it gradients in this step already (it may have been reduced).
  const size_t next = bucket + 1;
  if (next < bucket_slices_.size() &&
      (step_ == nullptr || step_->missing[next][replica] == layout_.buckets()[next].parameters)) {
    stage_ahead(replica, next);
  }
  Tensor place =
      staging(replica, bucket).narrow(0, layout_.offset(parameter) - layout_.buckets()[bucket].start, leaf.numel());
  const Tensor gradient = leaf.grad();
  if (gradient.impl()->storage == place.impl()->storage) return;  // accumulated into its place
  place.add_(gradient.reshape({gradient.numel()}));
  leaf.set_grad(Tensor());
}

void GradientReducer::check_owned(size_t replica, size_t bucket, const char* caller) const {
  TANDEM_CHECK(collective_.scatter_devices > 0, kGradientReducer, "::", caller,
               ": the collective is not a reduce-scatter, so every device holds every bucket's reduction");
  TANDEM_CHECK(replica < size() && bucket < bucket_slices_.size(), kGradientReducer, "::", caller, ": replica ",
               replica, ", bucket ", bucket, " but there are ", size(), " replicas and ", bucket_slices_.size(),
               " buckets");
}

int64_t GradientReducer::owned_offset(size_t replica, size_t bucket) const {
  check_owned(replica, bucket, "owned_offset");
  const auto chunk = layout_.buckets()[bucket].length / static_cast<int64_t>(collective_.scatter_devices);
  return static_cast<int64_t>(collective_.scatter_first_device + replica) * chunk;
}

Tensor GradientReducer::owned_gradients(size_t replica, size_t bucket) const {
  check_owned(replica, bucket, "owned_gradients");
  const GradientLayout::Bucket& range = layout_.buckets()[bucket];
  const int64_t chunk = range.length / static_cast<int64_t>(collective_.scatter_devices);
  if (staged()) return buffers_[replica].narrow(0, shard_offsets_[bucket], chunk);
  return buffers_[replica].narrow(0, range.start + owned_offset(replica, bucket), chunk);
}

void GradientReducer::zero_staged() {
  TANDEM_CHECK(!open_, kGradientReducer, "::zero_staged: a step is open; finish() or abandon() it first");
  if (!staged()) return;
  NoGradGuard no_grad;
  for (Tensor& shard : buffers_) shard.zero_();
  for (size_t b = 0; b < bucket_slices_.size(); ++b) drop_staging(b);
}

}  // namespace tandem::parallel
