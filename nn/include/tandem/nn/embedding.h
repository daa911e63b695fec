#pragma once
// nn::Embedding: a lookup table of num_embeddings vectors of embedding_dim values, indexed by int64 tensors.

#include <cstdint>
#include <string>

#include "tandem/nn/module.h"

namespace tandem::nn {

class Embedding : public Cloneable<Embedding> {
 public:
  // weight: [num_embeddings, embedding_dim] drawn from N(0, 1) with the global generator, as torch.nn.Embedding.
  // Errors: a size < 1.
  Embedding(int64_t num_embeddings, int64_t embedding_dim, Device device = Device::cpu());

  // indices: int64 of any shape, on weight's device -> float32 of shape indices.shape() + [embedding_dim], the rows
  // of weight at the indices (index_select of the flattened indices); differentiable in weight (rows looked up
  // several times add their gradients up). index_select checks the indices on the host (one copy from the device).
  // Errors: indices not int64, or not on weight's device; an index out of [0, num_embeddings) (index_select's error,
  // naming the index, its position in the flattened indices and num_embeddings as the size of dimension 0).
  Tensor forward(const Tensor& indices) override;
  std::string extra_repr() const override;

  int64_t num_embeddings() const { return num_embeddings_; }
  int64_t embedding_dim() const { return embedding_dim_; }

  Tensor weight;

 private:
  int64_t num_embeddings_;
  int64_t embedding_dim_;
};

}  // namespace tandem::nn
