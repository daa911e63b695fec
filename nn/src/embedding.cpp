#include "tandem/nn/embedding.h"

#include "tandem/core/ops.h"

namespace tandem::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, Device device)
    : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {
  TANDEM_CHECK(num_embeddings >= 1, "nn::Embedding: num_embeddings is ", num_embeddings, " but expected at least 1");
  TANDEM_CHECK(embedding_dim >= 1, "nn::Embedding: embedding_dim is ", embedding_dim, " but expected at least 1");
  weight = Tensor::randn({num_embeddings, embedding_dim}, device);
  register_parameter("weight", weight);
}

Tensor Embedding::forward(const Tensor& indices) {
  TANDEM_CHECK(indices.defined(), "nn::Embedding: the indices are undefined");
  TANDEM_CHECK(indices.dtype() == DType::Int64, "nn::Embedding: the indices are ", indices.dtype(),
               " but expected int64 (convert with .to(DType::Int64))");
  TANDEM_CHECK(indices.device() == weight.device(), "nn::Embedding: the indices are on ", indices.device(),
               " but the weight is on ", weight.device());
  Shape shape = indices.shape();
  shape.push_back(embedding_dim_);
  return index_select(weight, 0, indices.reshape({-1})).reshape(shape);
}

std::string Embedding::extra_repr() const {
  return std::to_string(num_embeddings_) + ", " + std::to_string(embedding_dim_);
}

}  // namespace tandem::nn
