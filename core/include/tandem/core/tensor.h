#pragma once
// Tensor: a cheap handle to shared state (storage, offset, shape, strides, dtype, autograd metadata). float32 is the
// default dtype and the only one arithmetic accepts; int64 and bfloat16 tensors are made, viewed, copied, converted
// (to(DType)), moved between devices, saved and loaded (Note [Dtypes of ops] in raw_ops.h).

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tandem/core/device.h"
#include "tandem/core/dtype.h"
#include "tandem/core/shape.h"
#include "tandem/core/storage.h"

namespace tandem {

class Tensor;

// The types Tensor::item<T>() converts to: the element types and double.
template <class T>
inline constexpr bool is_item_type_v = is_element_type_v<T> || std::is_same_v<T, double>;

namespace autograd {
class Node;
class AccumulateGrad;
}  // namespace autograd

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  Shape shape;
  Shape strides;  // in elements
  DType dtype = DType::Float32;

  // autograd metadata
  bool requires_grad = false;               // leaves only; non-leaves require grad iff grad_fn is set
  std::shared_ptr<autograd::Node> grad_fn;  // set on results of differentiable ops
  uint32_t output_nr = 0;                   // which output of grad_fn this tensor is
  std::shared_ptr<TensorImpl> grad;         // accumulated gradient (leaves)
  bool grad_stale = false;                  // leaves: grad's values no longer count (Tensor::mark_grad_stale)
  std::weak_ptr<autograd::AccumulateGrad> grad_accumulator;  // leaves: the node that accumulates into grad
  // leaves: (handle, hook) pairs, see Tensor::register_post_accumulate_grad_hook
  std::vector<std::pair<uint64_t, std::function<void(const Tensor&)>>> post_accumulate_grad_hooks;
  // leaves: refuses uses of .grad that it is not ready for, see Tensor::set_grad_check
  std::function<void(const std::string& user)> grad_check;
};

class Tensor {
 public:
  Tensor() = default;  // undefined tensor
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- factories (float32 unless a dtype is given) ----
  static Tensor empty(const Shape& shape, Device device = Device::cpu());
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Tensor ones(const Shape& shape, Device device = Device::cpu());
  static Tensor ones(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Tensor full(const Shape& shape, float value, Device device = Device::cpu());
  // `value` converted to `dtype` with a check (int64: truncated toward zero; NaN, infinities and values out of range
  // are an Error; bfloat16: rounded to nearest even). Integers beyond 2^53 are not exact as a double: use
  // from_vector for them.
  static Tensor full(const Shape& shape, double value, DType dtype, Device device = Device::cpu());
  // Random tensors, drawn from the calling thread's generator stream (Note [Generator streams] in random.h): the
  // default stream on the caller's thread whatever `device` is, the device's own stream inside a parallel replica.
  // rand and uniform fill a GPU tensor with a kernel (Note [Random draws in captured graphs]); randn and randint draw
  // on the host and copy, and throw for a GPU whose stream a CUDA graph is capturing.
  static Tensor randn(const Shape& shape, Device device = Device::cpu());  // N(0, 1)
  static Tensor rand(const Shape& shape, Device device = Device::cpu());   // uniform [0, 1)
  static Tensor uniform(const Shape& shape, float low, float high, Device device = Device::cpu());
  // int64 values uniform in [low, high) (random::integers), as torch.randint. Errors: low >= high.
  static Tensor randint(int64_t low, int64_t high, const Shape& shape, Device device = Device::cpu());
  static Tensor from_vector(const std::vector<float>& values, const Shape& shape, Device device = Device::cpu());
  // int64 or bfloat16 values from a std::vector<int64_t> or std::vector<BFloat16> (a template, so that a braced list
  // of numbers, from_vector({1, 2}, {2}), still means float32 values).
  template <class T, class = std::enable_if_t<std::is_same_v<T, int64_t> || std::is_same_v<T, BFloat16>>>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape, Device device = Device::cpu());
  // [start, start + 1, ..., end - 1] (empty when end <= start) as `dtype`, like torch.arange with integer bounds.
  static Tensor arange(int64_t end, DType dtype = DType::Int64, Device device = Device::cpu());
  static Tensor arange(int64_t start, int64_t end, DType dtype = DType::Int64, Device device = Device::cpu());
  // [start, start + step, ...] short of end: ceil((end - start) / step) values, as torch.arange with a step. Each
  // value start + i * step is computed in double, then truncated toward zero for int64, or rounded to float32 (and
  // from there converted) for the other dtypes. Integer bounds with a step take this overload too (arange(0, 5, 2)
  // is float32 [0, 2, 4] unless a dtype is given). Errors: bounds or step not finite; step 0, or of the sign opposite
  // to end - start; as int64, a value beyond int64's range.
  static Tensor arange(double start, double end, double step, DType dtype = DType::Float32,
                       Device device = Device::cpu());
  // `steps` float32 values from start to end, both included, evenly spaced, as torch.linspace (the first half
  // and the middle counted from start, the rest from end, so both ends are exact; one step: [start]). Errors: steps
  // < 0.
  static Tensor linspace(double start, double end, int64_t steps, Device device = Device::cpu());
  static Tensor scalar(float value, Device device = Device::cpu());  // shape {}
  // An uninitialized tensor in page-locked host memory (is_pinned()) on the CPU device `device`, as PyTorch's
  // torch.empty(..., pin_memory=True). Errors: a CUDA device; no CUDA device to pin for (none visible, or a build
  // without CUDA).
  static Tensor empty_pinned(const Shape& shape, DType dtype = DType::Float32, Device device = Device::cpu());

  // ---- metadata ----
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  const Shape& strides() const;
  int64_t storage_offset() const;
  int64_t dim() const;
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const;
  Device device() const;
  DType dtype() const;
  bool is_contiguous() const;
  // Whether the values live in page-locked host memory (pin_memory, empty_pinned), which copies to a GPU can read
  // asynchronously; false for CUDA tensors and for ordinary host memory.
  bool is_pinned() const;
  const void* data_ptr() const;  // address of the first element (a device address on CUDA)
  void* mutable_data_ptr() const;
  // Typed element pointers (a device address on CUDA). Errors: the tensor's dtype is not T's ("Tensor::data_as: the
  // tensor is int64 but expected float32 (convert with .to(DType::Float32))").
  template <class T>
  const T* data_as() const {
    return static_cast<const T*>(typed_data_ptr(dtype_of<T>(), "Tensor::data_as"));
  }
  template <class T>
  T* mutable_data_as() const {
    return static_cast<T*>(typed_data_ptr(dtype_of<T>(), "Tensor::mutable_data_as"));
  }
  // float32 tensors only (the same check as data_as<float>).
  const float* data() const { return static_cast<const float*>(typed_data_ptr(DType::Float32, "Tensor::data")); }
  float* mutable_data() const { return static_cast<float*>(typed_data_ptr(DType::Float32, "Tensor::mutable_data")); }
  const std::shared_ptr<Storage>& storage() const;
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }
  bool shares_storage_with(const Tensor& other) const;

  // ---- host access ----
  // Row-major values copied to the host. Errors: the tensor's dtype is not T's (to_vector: float32 only).
  template <class T, class = std::enable_if_t<is_element_type_v<T>>>
  std::vector<T> to_vector_as() const;
  std::vector<float> to_vector() const;
  // The value of a one-element tensor of any dtype, converted to T as PyTorch's item<T>() does: a value that T
  // cannot hold (NaN or an infinity as int64_t, a finite value beyond float's range) is an Error; float32 and
  // bfloat16 values as int64_t are truncated toward zero.
  template <class T, class = std::enable_if_t<is_item_type_v<T>>>
  T item() const;
  float item() const;       // float32 tensors only (an Error for other dtypes: use item<float>())
  std::string str() const;  // values and metadata, for printing

  // ---- copies and views (differentiable) ----
  Tensor to(Device device) const;  // same device: returns *this (no copy); the dtype is kept
  // As to(device), but with non_blocking a copy from page-locked memory (is_pinned(), contiguous) to a CUDA device is
  // asynchronous: it is enqueued on that device's compute stream, ordered before every later use of the result, and
  // the host does not wait for it (Note [Copies from pinned memory] in core/src/cuda/cross_device_copy.cpp). Until
  // it has run, the source must not be written (reading the result, or StreamMarker::record(device).synchronize(),
  // waits for it); the source's memory itself is not reused before (Note [Pinned block reuse]). Every other copy
  // (pageable or strided sources, copies to the host) behaves exactly like to(device), as in PyTorch.
  Tensor to(Device device, bool non_blocking) const;
  // A copy of this CPU tensor in page-locked host memory on the same CPU device, with its shape, dtype and values
  // (contiguous); *this when it is pinned already. Differentiable (the gradient passes through). Errors: a CUDA
  // tensor; no CUDA device to pin for (none visible, or a build without CUDA), as for empty_pinned.
  Tensor pin_memory() const;
  // A copy converted to `dtype` (Note [Conversions] in core/src/element_convert.h); returns *this when the dtype is
  // already `dtype`. Differentiable between float32 and bfloat16 (the gradient is converted back); a conversion to
  // int64 has no history, as in PyTorch.
  Tensor to(DType dtype) const;
  Tensor clone() const;
  Tensor contiguous() const;              // *this when already contiguous
  Tensor view(const Shape& shape) const;  // contiguous tensors only; -1 allowed once
  Tensor reshape(const Shape& shape) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;   // a view
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;  // torch.chunk rules (may return fewer)
  std::vector<Tensor> split(const std::vector<int64_t>& sizes, int64_t dim = 0) const;  // views
  Tensor t() const;                                                                     // 2-D transpose (a view)
  // Dimension views, as PyTorch's (negative dims count from the end; every one shares storage and is differentiable):
  // dims dim0 and dim1 swapped; dims reordered so that result dim i is input dim dims[i] (a permutation of every
  // dim); a size-1 dim inserted at `dim` (in [-(ndim + 1), ndim]); dim `dim` removed when its size is 1 (the tensor
  // itself otherwise), or every size-1 dim; dims start_dim..end_dim merged into one (a copy, as reshape, when their
  // strides do not allow a view; a 0-D tensor flattens to [1]).
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor permute(const Shape& dims) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;
  Tensor squeeze() const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  // Broadcast view (stride 0 on expanded dims): new leading dims may be added, -1 keeps a dim's size.
  Tensor expand(const Shape& shape) const;
  Tensor sum_to(const Shape& shape) const;  // sums broadcast dimensions away (the backward of expand)

  // ---- in-place (never recorded; throws on a leaf that requires grad while grad mode is on) ----
  Tensor& zero_();              // any dtype
  Tensor& fill_(double value);  // any dtype; `value` converted as in full(..., dtype)
  // Any devices and dtypes (converted as Tensor::to(DType) does), same shape (or broadcastable src).
  Tensor& copy_(const Tensor& src);
  Tensor& add_(const Tensor& other, float alpha = 1.0f);  // this += alpha * other (same device)
  Tensor& mul_(float factor);

  // ---- autograd ----
  bool requires_grad() const;
  // Leaves only, and (when requires_grad) floating point dtypes only, as in PyTorch: an int64 tensor cannot require
  // gradients.
  Tensor& set_requires_grad(bool requires_grad = true);
  bool is_leaf() const;
  // Undefined until a backward reaches it. A stale gradient (mark_grad_stale) is zeroed first, so its values are
  // always the ones that count.
  Tensor grad() const;
  void set_grad(const Tensor& grad) const;  // replaces (or with an undefined tensor, clears) .grad and its stale mark
  // Note [Stale gradients]: marks .grad stale: its values no longer count, as after zeroing it, but nothing is
  // written now. The next gradient that backward accumulates into this leaf is written over them instead of added
  // (AccumulateGrad copies it; a node that writes it in place, Note [Gradients written in place] in
  // core/src/autograd/engine.cpp, writes it with beta = 0), which clears the mark; grad() zeroes a stale gradient
  // before returning it, which clears it too. So a gradient buffer that every backward fills entirely needs no pass
  // that zeroes it before each step (parallel::ReplicatedModule::zero_grad). Does nothing without a .grad. Not
  // synchronized with a backward that reaches this leaf, like .grad itself.
  void mark_grad_stale() const;
  bool grad_is_stale() const;  // whether .grad is marked stale
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  // Accumulates the gradients of this tensor into the leaves' .grad (autograd::backward of one root). An undefined
  // `gradient` seeds a one-element tensor with 1. Without retain_graph the nodes that ran free their saved tensors,
  // and a second backward through one of them is an error naming it; with it, the graph can run again.
  void backward(const Tensor& gradient = {}, bool retain_graph = false) const;
  Tensor detach() const;  // shares storage, no autograd history
  // PyTorch's `tensor.data = data`: this tensor takes over `data`'s storage, offset, shape, strides and dtype
  // (nothing is copied, `data`'s autograd history is not taken). The handle, and every handle sharing it, keeps its
  // identity, requires_grad, post-accumulate-grad hooks and .grad, and sees the new values, device and shape; views
  // of the old data keep the old storage. A graph recorded before the call must not be run backward after it. Not
  // synchronized with other uses of this tensor: call it while none runs.
  // Errors: either tensor undefined; this tensor the result of an operation (only leaves take new data); a defined
  // .grad without the new shape and device (move or clear it first).
  void set_data(const Tensor& data) const;

  // Calls hook(leaf) each time a backward pass has accumulated a gradient into this leaf's .grad, right after the
  // accumulation was issued (on a GPU it may still be running on the device's compute stream, where later work is
  // ordered after it), on the thread running that backward, while the leaf's accumulator node is locked (so a hook
  // must not run a backward that reaches this leaf); hooks run in registration order. An exception thrown
  // by a hook propagates out of the backward call. Returns a handle for remove_post_accumulate_grad_hook. Registering
  // and removing are not synchronized with a backward pass that reaches this leaf: do either while none runs.
  // Errors: an undefined tensor; a tensor that is not a leaf requiring grad.
  uint64_t register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const;
  // Removes the hook registered under `handle`; does nothing when there is none (already removed).
  void remove_post_accumulate_grad_hook(uint64_t handle) const;

  // Note [Gradient checks]: the owner of a leaf's gradient that is not always ready to be used (a data-parallel
  // module whose gradients hold local values until their reduction: parallel::ReplicatedModule) sets a check on the
  // leaf; code about to consume .grad (every optimizer's step) calls check_grad(user) first, and the check throws an
  // Error naming `user` and the cause when the gradient must not be used now. One check per leaf; an empty function
  // removes it. Not synchronized with other uses of this tensor. Errors (set_grad_check): an undefined tensor; a
  // tensor that is not a leaf requiring grad; a check set already (remove it first).
  void set_grad_check(std::function<void(const std::string& user)> check) const;
  // Runs the check set on this tensor, if any (Note [Gradient checks]); its Error propagates.
  void check_grad(const std::string& user) const;
  bool has_grad_check() const { return impl_ != nullptr && impl_->grad_check != nullptr; }

 private:
  void check_defined(const char* caller) const;
  // data_ptr() after checking that the tensor is defined and of dtype `expected`.
  void* typed_data_ptr(DType expected, const char* caller) const;
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& tensor);

// New contiguous tensors of x's shape, dtype and device, without autograd history (torch.empty_like, zeros_like,
// ones_like). randn_like draws N(0, 1) values as Tensor::randn does (the calling thread's generator stream) and
// converts them to x's dtype. Errors: x undefined; randn_like of an int64 tensor.
Tensor empty_like(const Tensor& x);
Tensor zeros_like(const Tensor& x);
Tensor ones_like(const Tensor& x);
Tensor randn_like(const Tensor& x);

}  // namespace tandem
