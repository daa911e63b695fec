#include "batched_read.h"

#include "tandem/core/error.h"
#include "tandem/core/ops.h"

namespace tandem::trainers {

size_t BatchedRead::add(const Tensor& values) {
  TANDEM_CHECK(!read_, "BatchedRead::add: called after read()");
  TANDEM_CHECK(values.device() == device_, "BatchedRead::add: a tensor on ", values.device(), " but expected one on ",
               device_);
  TANDEM_CHECK(values.dtype() == DType::Float32, "BatchedRead::add: a tensor of ", values.dtype(),
               " but expected float32");
  pending_.push_back(values.reshape({values.numel()}));
  return pending_.size() - 1;
}

void BatchedRead::read() {
  TANDEM_CHECK(!read_, "BatchedRead::read: called a second time; each BatchedRead reads once");
  read_ = true;
  std::vector<Tensor> nonempty;
  for (const Tensor& values : pending_) {
    if (values.numel() > 0) nonempty.push_back(values);
  }
  const std::vector<float> all = nonempty.empty() ? std::vector<float>() : cat(nonempty).to_vector();
  size_t offset = 0;
  for (const Tensor& values : pending_) {
    const auto first = all.begin() + static_cast<std::ptrdiff_t>(offset);
    values_.emplace_back(first, first + values.numel());
    offset += static_cast<size_t>(values.numel());
  }
  pending_.clear();
}

}  // namespace tandem::trainers
