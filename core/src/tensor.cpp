// Tensor: factories, metadata, host access, printing and in-place updates. Views and copies that record autograd
// history live in views.cpp; arithmetic in ops.cpp.
#include "tandem/core/tensor.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <new>
#include <sstream>

#include "autograd/engine.h"
#include "raw_ops.h"
#include "scalar_cast.h"
#include "tandem/core/autograd.h"
#include "tandem/core/error.h"
#include "tandem/core/grad_mode.h"
#include "tandem/core/random.h"

namespace tandem {

// ---- factories ----------------------------------------------------------------------------------------------------

Tensor Tensor::empty(const Shape& shape, Device device) { return empty(shape, DType::Float32, device); }

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  return raw::allocate(shape, dtype, device, /*pinned=*/false, "Tensor::empty");
}

Tensor Tensor::empty_pinned(const Shape& shape, DType dtype, Device device) {
  return raw::allocate(shape, dtype, device, /*pinned=*/true, "Tensor::empty_pinned");
}

Tensor Tensor::full(const Shape& shape, float value, Device device) {
  return full(shape, static_cast<double>(value), DType::Float32, device);
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor out = empty(shape, dtype, device);
  raw::fill(out, value, "Tensor::full");
  return out;
}

Tensor Tensor::zeros(const Shape& shape, Device device) { return full(shape, 0.0f, device); }
Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }
Tensor Tensor::ones(const Shape& shape, Device device) { return full(shape, 1.0f, device); }
Tensor Tensor::ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }
Tensor Tensor::scalar(float value, Device device) { return full({}, value, device); }

namespace {

template <class T>
Tensor from_host_values(const std::vector<T>& values, const Shape& shape, Device device) {
  Tensor out = Tensor::empty(shape, dtype_of<T>(), device);
  TANDEM_CHECK(static_cast<int64_t>(values.size()) == out.numel(), "Tensor::from_vector: got ", values.size(),
               " values for shape ", to_string(shape), " (", out.numel(), " elements)");
  if (out.numel() > 0) backend::for_device(device).from_host(values.data(), out);
  return out;
}

}  // namespace

Tensor Tensor::from_vector(const std::vector<float>& values, const Shape& shape, Device device) {
  return from_host_values(values, shape, device);
}
template <class T, class>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape, Device device) {
  return from_host_values(values, shape, device);
}
template Tensor Tensor::from_vector<int64_t, void>(const std::vector<int64_t>&, const Shape&, Device);
template Tensor Tensor::from_vector<BFloat16, void>(const std::vector<BFloat16>&, const Shape&, Device);

Tensor Tensor::arange(int64_t end, DType dtype, Device device) { return arange(0, end, dtype, device); }

Tensor Tensor::arange(int64_t start, int64_t end, DType dtype, Device device) {
  const int64_t count = end > start ? end - start : 0;  // end - start overflows only when end > start
  TANDEM_CHECK(end <= start || count > 0, "Tensor::arange: the range [", start, ", ", end, ") is too long");
  checked_nbytes({count}, sizeof(int64_t), "Tensor::arange");
  std::vector<int64_t> values(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) values[static_cast<size_t>(i)] = start + i;
  return from_vector(values, {count}, device).to(dtype);
}

namespace {

// `values` (computed in double) as a 1-D tensor of `dtype` on `device`: int64 truncated toward zero (a value out of
// int64's range is an Error naming `caller`), other dtypes rounded to float32 first.
Tensor from_doubles(const std::vector<double>& values, DType dtype, Device device, const char* caller) {
  const Shape shape{static_cast<int64_t>(values.size())};
  if (dtype == DType::Int64) {
    std::vector<int64_t> integers(values.size());
    for (size_t i = 0; i < values.size(); ++i) integers[i] = detail::checked_scalar_cast<int64_t>(values[i], caller);
    return Tensor::from_vector(integers, shape, device);
  }
  return Tensor::from_vector(std::vector<float>(values.begin(), values.end()), shape, device).to(dtype);
}

}  // namespace

Tensor Tensor::arange(double start, double end, double step, DType dtype, Device device) {
  TANDEM_CHECK(std::isfinite(start) && std::isfinite(end) && std::isfinite(step), "Tensor::arange: start ", start,
               ", end ", end, " and step ", step, " must be finite");
  TANDEM_CHECK(step != 0.0, "Tensor::arange: step must be non-zero");
  TANDEM_CHECK(end == start || (end > start) == (step > 0.0), "Tensor::arange: step ", step,
               " does not lead from start ", start, " to end ", end, " (expected the sign of end - start)");
  const double count = std::ceil((end - start) / step);
  TANDEM_CHECK(count < 0x1.0p62, "Tensor::arange: the range [", start, ", ", end, ") in steps of ", step,
               " is too long");
  checked_nbytes({static_cast<int64_t>(count)}, element_size(dtype), "Tensor::arange");
  std::vector<double> values(static_cast<size_t>(count));
  for (size_t i = 0; i < values.size(); ++i) values[i] = start + static_cast<double>(i) * step;
  return from_doubles(values, dtype, device, "Tensor::arange");
}

Tensor Tensor::linspace(double start, double end, int64_t steps, Device device) {
  TANDEM_CHECK(steps >= 0, "Tensor::linspace: steps is ", steps, " but expected at least 0");
  checked_nbytes({steps}, sizeof(float), "Tensor::linspace");
  const double step = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0.0;
  std::vector<double> values(static_cast<size_t>(steps));
  for (int64_t i = 0; i < steps; ++i)
    values[static_cast<size_t>(i)] =
        i < (steps + 1) / 2 ? start + static_cast<double>(i) * step : end - static_cast<double>(steps - 1 - i) * step;
  return from_doubles(values, DType::Float32, device, "Tensor::linspace");
}

namespace {

// A tensor of `shape` on `device` filled with host values of type T (its dtype) from `draw`. The tensor is allocated
// first, so a shape that does not fit in memory is refused by the allocator (an Error) before any host buffer of that
// size is asked for; running out of host memory for the values is an Error too. A GPU whose stream is being captured
// is refused before anything is drawn: the copy of the values could not be recorded (Note [Random draws in captured
// graphs] in random.h).
template <typename T, typename Draw>
Tensor drawn(const Shape& shape, Device device, const char* caller, Draw draw) {
  checked_nbytes(shape, sizeof(T), caller);  // names the caller for a shape that overflows
  Tensor out = Tensor::empty(shape, dtype_of<T>(), device);
  TANDEM_CHECK(!device.is_cuda() || !backend::cuda_stream_capturing(device.index()), caller,
               ": draws its values on the host and copies them to ", device,
               ", whose stream is being captured into a CUDA graph, which cannot record that copy (only Tensor::rand "
               "and Tensor::uniform draw on the device)");
  const int64_t count = out.numel();
  std::vector<T> values;
  try {
    values = draw(static_cast<size_t>(count));
  } catch (const std::bad_alloc&) {
    TANDEM_FAIL(caller, ": out of host memory drawing ", count, " values for shape ", to_string(shape));
  }
  if (count > 0) backend::for_device(device).from_host(values.data(), out);
  return out;
}

}  // namespace

Tensor Tensor::randn(const Shape& shape, Device device) {
  return drawn<float>(shape, device, "Tensor::randn", [](size_t n) { return random::normal(n); });
}

Tensor Tensor::rand(const Shape& shape, Device device) { return uniform(shape, 0.0f, 1.0f, device); }

Tensor Tensor::uniform(const Shape& shape, float low, float high, Device device) {
  constexpr const char* fn = "Tensor::uniform";
  TANDEM_CHECK(low < high, fn, ": low (", low, ") must be less than high (", high, ")");
  if (!device.is_cuda()) {
    return drawn<float>(shape, device, fn, [=](size_t n) { return random::uniform(n, low, high); });
  }
  // Note [Random draws in captured graphs] in random.h: computed on the GPU, the host's values.
  checked_nbytes(shape, sizeof(float), fn);
  Tensor out = Tensor::empty(shape, DType::Float32, device);
  backend::cuda_fill_uniform(out, low, high, fn);
  return out;
}

Tensor Tensor::randint(int64_t low, int64_t high, const Shape& shape, Device device) {
  TANDEM_CHECK(low < high, "Tensor::randint: low (", low, ") must be less than high (", high, ")");
  return drawn<int64_t>(shape, device, "Tensor::randint", [=](size_t n) { return random::integers(n, low, high); });
}

Tensor empty_like(const Tensor& x) {
  raw::check_defined("empty_like", x);
  return Tensor::empty(x.shape(), x.dtype(), x.device());
}

Tensor zeros_like(const Tensor& x) {
  raw::check_defined("zeros_like", x);
  return Tensor::zeros(x.shape(), x.dtype(), x.device());
}

Tensor ones_like(const Tensor& x) {
  raw::check_defined("ones_like", x);
  return Tensor::ones(x.shape(), x.dtype(), x.device());
}

Tensor randn_like(const Tensor& x) {
  raw::check_defined("randn_like", x);
  TANDEM_CHECK(is_floating_point(x.dtype()), "randn_like: the input is ", x.dtype(),
               " but expected a floating point dtype (float32, bfloat16)");
  return Tensor::randn(x.shape(), x.device()).to(x.dtype());
}

// ---- metadata -----------------------------------------------------------------------------------------------------

void Tensor::check_defined(const char* caller) const {
  TANDEM_CHECK(impl_ != nullptr, "Tensor::", caller, ": the tensor is undefined");
}

const Shape& Tensor::shape() const {
  check_defined("shape");
  return impl_->shape;
}
const Shape& Tensor::strides() const {
  check_defined("strides");
  return impl_->strides;
}
int64_t Tensor::storage_offset() const {
  check_defined("storage_offset");
  return impl_->offset;
}
int64_t Tensor::dim() const { return static_cast<int64_t>(shape().size()); }
int64_t Tensor::size(int64_t d) const { return shape()[wrap_dim(d, dim(), "Tensor::size")]; }
int64_t Tensor::numel() const { return numel_of(shape()); }
Device Tensor::device() const {
  check_defined("device");
  return impl_->storage->device();
}
DType Tensor::dtype() const {
  check_defined("dtype");
  return impl_->dtype;
}
const std::shared_ptr<Storage>& Tensor::storage() const {
  check_defined("storage");
  return impl_->storage;
}

bool Tensor::is_pinned() const { return storage()->is_pinned(); }

bool Tensor::is_contiguous() const {
  const Shape& sizes = shape();
  if (numel() == 0) return true;
  int64_t expected = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] == 1) continue;  // the stride of a size-1 dimension never matters
    if (impl_->strides[i] != expected) return false;
    expected *= sizes[i];
  }
  return true;
}

const void* Tensor::data_ptr() const { return mutable_data_ptr(); }

void* Tensor::typed_data_ptr(DType expected, const char* caller) const {
  TANDEM_CHECK(impl_ != nullptr, caller, ": the tensor is undefined");
  TANDEM_CHECK(impl_->dtype == expected, caller, ": the tensor is ", impl_->dtype, " but expected ", expected,
               " (convert with ", raw::conversion_hint(expected), ")");
  return mutable_data_ptr();
}

void* Tensor::mutable_data_ptr() const {
  check_defined("data_ptr");
  char* base = static_cast<char*>(impl_->storage->data());
  return base == nullptr ? nullptr : base + impl_->offset * static_cast<int64_t>(element_size(impl_->dtype));
}

bool Tensor::shares_storage_with(const Tensor& other) const {
  return defined() && other.defined() && impl_->storage == other.impl_->storage;
}

// ---- host access --------------------------------------------------------------------------------------------------

template <class T, class>
std::vector<T> Tensor::to_vector_as() const {
  typed_data_ptr(dtype_of<T>(), "Tensor::to_vector_as");
  const Tensor source = raw::contiguous(*this);
  std::vector<T> values(static_cast<size_t>(numel()));
  if (!values.empty()) backend::for_device(device()).to_host(source, values.data());
  return values;
}

template std::vector<float> Tensor::to_vector_as<float, void>() const;
template std::vector<int64_t> Tensor::to_vector_as<int64_t, void>() const;
template std::vector<BFloat16> Tensor::to_vector_as<BFloat16, void>() const;

std::vector<float> Tensor::to_vector() const {
  typed_data_ptr(DType::Float32, "Tensor::to_vector");
  return to_vector_as<float>();
}

template <class T, class>
T Tensor::item() const {
  TANDEM_CHECK(numel() == 1, "Tensor::item: expected a one-element tensor, got shape ", to_string(shape()));
  detail::HostScalar value;
  switch (dtype()) {
    case DType::Float32:
      value = static_cast<double>(to_vector_as<float>()[0]);
      break;
    case DType::Int64:
      value = to_vector_as<int64_t>()[0];
      break;
    case DType::BFloat16:
      value = static_cast<double>(static_cast<float>(to_vector_as<BFloat16>()[0]));
      break;
  }
  return detail::checked_scalar_cast<T>(value, "Tensor::item");
}

template float Tensor::item<float, void>() const;
template double Tensor::item<double, void>() const;
template int64_t Tensor::item<int64_t, void>() const;
template BFloat16 Tensor::item<BFloat16, void>() const;

float Tensor::item() const {
  typed_data_ptr(DType::Float32, "Tensor::item");
  return item<float>();
}

std::string Tensor::str() const {
  if (!defined()) return "Tensor(undefined)";
  constexpr int64_t kShown = 6;  // per dimension, from each end
  // int64 values print exactly; bfloat16 values convert exactly to float32.
  const bool integral = dtype() == DType::Int64;
  const std::vector<int64_t> integers = integral ? to_vector_as<int64_t>() : std::vector<int64_t>();
  const std::vector<float> values = integral ? std::vector<float>() : to(DType::Float32).detach().to_vector();
  const Shape& sizes = shape();
  std::ostringstream os;
  os << std::setprecision(6);
  // Prints the block of values starting at flat index `base` for dimensions d.. (row-major).
  auto print = [&](auto&& self, size_t d, int64_t base, int64_t stride) -> void {
    if (d == sizes.size()) {
      if (integral) {
        os << integers[static_cast<size_t>(base)];
      } else {
        os << values[static_cast<size_t>(base)];
      }
      return;
    }
    const int64_t inner = stride / std::max<int64_t>(sizes[d], 1);
    os << "[";
    for (int64_t i = 0; i < sizes[d]; ++i) {
      if (sizes[d] > 2 * kShown && i == kShown) {
        os << "..., ";
        i = sizes[d] - kShown;
      }
      if (i > 0 && !(sizes[d] > 2 * kShown && i == sizes[d] - kShown)) os << (d + 1 == sizes.size() ? ", " : ",\n ");
      self(self, d + 1, base + i * inner, inner);
    }
    os << "]";
  };
  os << "tensor(";
  print(print, 0, 0, numel());
  os << ", shape=" << to_string(sizes) << ", device=" << device();
  if (dtype() != DType::Float32) os << ", dtype=" << dtype();
  if (requires_grad()) os << ", requires_grad";
  os << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& tensor) { return os << tensor.str(); }

// ---- in-place updates ---------------------------------------------------------------------------------------------

namespace {

void check_inplace_allowed(const Tensor& t, const char* caller) {
  TANDEM_CHECK(t.defined(), "Tensor::", caller, ": the tensor is undefined");
  TANDEM_CHECK(!(GradMode::is_enabled() && t.requires_grad()), "Tensor::", caller,
               ": in-place update of a tensor that requires grad; do it under NoGradGuard (or on detach())");
}

void check_contiguous_target(const Tensor& t, const char* caller) {
  TANDEM_CHECK(t.is_contiguous(), "Tensor::", caller, ": the target must be contiguous, got shape ",
               to_string(t.shape()), " with strides ", to_string(t.strides()));
}

}  // namespace

Tensor& Tensor::fill_(double value) {
  check_inplace_allowed(*this, "fill_");
  raw::fill(*this, value, "Tensor::fill_");
  return *this;
}

Tensor& Tensor::zero_() { return fill_(0.0); }

Tensor& Tensor::copy_(const Tensor& src) {
  check_inplace_allowed(*this, "copy_");
  raw::check_defined("Tensor::copy_", src, "source");
  if (src.shape() == shape()) {
    raw::copy(src, *this);
  } else {
    const Tensor local = src.device() == device() ? src : raw::to_device(src, device());
    raw::copy(raw::expand(local, shape(), "Tensor::copy_"), *this);
  }
  return *this;
}

Tensor& Tensor::add_(const Tensor& other, float alpha) {
  check_inplace_allowed(*this, "add_");
  raw::check_defined("Tensor::add_", other, "other");
  raw::check_float32("Tensor::add_", {*this, other});
  raw::check_same_device("Tensor::add_", *this, other);
  check_contiguous_target(*this, "add_");
  if (numel() == 0) return *this;
  // this + alpha * other, other broadcast: alpha * other rounds before the sum, alpha == 1 included (exact).
  backend::for_device(device()).pointwise({backend::Pointwise::Axpy, alpha},
                                          {*this, raw::expand(other, shape(), "Tensor::add_")}, *this);
  return *this;
}

Tensor& Tensor::mul_(float factor) {
  check_inplace_allowed(*this, "mul_");
  raw::check_float32("Tensor::mul_", {*this});
  check_contiguous_target(*this, "mul_");
  if (numel() > 0) backend::for_device(device()).pointwise({backend::Pointwise::Scale, factor}, {*this}, *this);
  return *this;
}

// ---- autograd accessors -------------------------------------------------------------------------------------------

bool Tensor::requires_grad() const { return defined() && (impl_->requires_grad || impl_->grad_fn != nullptr); }

Tensor& Tensor::set_requires_grad(bool requires_grad) {
  check_defined("set_requires_grad");
  TANDEM_CHECK(impl_->grad_fn == nullptr,
               "Tensor::set_requires_grad: only leaves can be set; this tensor is the "
               "result of ",
               impl_->grad_fn->name(), " (use detach() first)");
  TANDEM_CHECK(!requires_grad || is_floating_point(impl_->dtype), "Tensor::set_requires_grad: the tensor is ",
               impl_->dtype, " but only floating point tensors (float32, bfloat16) can require gradients");
  impl_->requires_grad = requires_grad;
  return *this;
}

bool Tensor::is_leaf() const { return defined() && impl_->grad_fn == nullptr; }

Tensor Tensor::grad() const {
  check_defined("grad");
  Tensor grad(impl_->grad);
  if (impl_->grad_stale) {
    NoGradGuard no_grad;
    grad.zero_();
    impl_->grad_stale = false;
  }
  return grad;
}

void Tensor::mark_grad_stale() const {
  check_defined("mark_grad_stale");
  impl_->grad_stale = impl_->grad != nullptr;
}

bool Tensor::grad_is_stale() const {
  check_defined("grad_is_stale");
  return impl_->grad_stale;
}

void Tensor::set_grad(const Tensor& grad) const {
  check_defined("set_grad");
  if (grad.defined()) {
    TANDEM_CHECK(grad.shape() == shape(), "Tensor::set_grad: gradient has shape ", to_string(grad.shape()),
                 " but the tensor has shape ", to_string(shape()));
    TANDEM_CHECK(grad.device() == device(), "Tensor::set_grad: gradient is on ", grad.device(),
                 " but the tensor is on ", device());
    TANDEM_CHECK(grad.dtype() == dtype(), "Tensor::set_grad: gradient is ", grad.dtype(), " but the tensor is ",
                 dtype());
  }
  impl_->grad = grad.impl_ptr();
  impl_->grad_stale = false;
}

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  check_defined("grad_fn");
  return impl_->grad_fn;
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  check_defined("backward");
  autograd::detail::run_backward(
      {*this}, {autograd::detail::seed_gradient(*this, gradient, "Tensor::backward", "the tensor")}, retain_graph);
}

Tensor Tensor::detach() const {
  check_defined("detach");
  return raw::alias(*this, impl_->shape, impl_->strides, impl_->offset);
}

void Tensor::set_data(const Tensor& data) const {
  check_defined("set_data");
  TANDEM_CHECK(data.defined(), "Tensor::set_data: the new data is an undefined tensor");
  TANDEM_CHECK(impl_->grad_fn == nullptr, "Tensor::set_data: the tensor is the result of ", impl_->grad_fn->name(),
               " but only leaves can take new data");
  if (impl_->grad) {
    const Tensor grad(impl_->grad);
    TANDEM_CHECK(grad.shape() == data.shape() && grad.device() == data.device(), "Tensor::set_data: the tensor's ",
                 "gradient has shape ", to_string(grad.shape()), " on ", grad.device(), " but the new data has shape ",
                 to_string(data.shape()), " on ", data.device(), "; move or clear the gradient first (set_grad)");
  }
  // An accumulator made for the old data records its shape and device; the next graph needs one for the new data.
  if (data.shape() != shape() || data.device() != device()) impl_->grad_accumulator.reset();
  const TensorImpl& source = *data.impl();
  impl_->storage = source.storage;
  impl_->offset = source.offset;
  impl_->shape = source.shape;
  impl_->strides = source.strides;
  impl_->dtype = source.dtype;
}

uint64_t Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const {
  check_defined("register_post_accumulate_grad_hook");
  TANDEM_CHECK(impl_->grad_fn == nullptr && impl_->requires_grad,
               "Tensor::register_post_accumulate_grad_hook: the tensor is ",
               impl_->grad_fn ? "the result of an operation" : "a leaf that does not require grad",
               " but expected a leaf that requires grad");
  static std::atomic<uint64_t> next_handle{1};
  const uint64_t handle = next_handle.fetch_add(1, std::memory_order_relaxed);
  impl_->post_accumulate_grad_hooks.emplace_back(handle, std::move(hook));
  return handle;
}

void Tensor::remove_post_accumulate_grad_hook(uint64_t handle) const {
  check_defined("remove_post_accumulate_grad_hook");
  std::erase_if(impl_->post_accumulate_grad_hooks, [&](const auto& entry) { return entry.first == handle; });
}

void Tensor::set_grad_check(std::function<void(const std::string& user)> check) const {
  check_defined("set_grad_check");
  if (!check) {
    impl_->grad_check = nullptr;
    return;
  }
  TANDEM_CHECK(impl_->grad_fn == nullptr && impl_->requires_grad, "Tensor::set_grad_check: the tensor is ",
               impl_->grad_fn ? "the result of an operation" : "a leaf that does not require grad",
               " but expected a leaf that requires grad");
  TANDEM_CHECK(!impl_->grad_check, "Tensor::set_grad_check: the tensor's gradient is checked already (by another ",
               "data-parallel module?); remove that check first");
  impl_->grad_check = std::move(check);
}

void Tensor::check_grad(const std::string& user) const {
  if (impl_ != nullptr && impl_->grad_check) impl_->grad_check(user);
}

}  // namespace tandem
