#pragma once
// The losses of loss_functions.h as modules holding their options (LibTorch's names). A loss module takes two inputs:
// loss(input, target), or forward_all({input, target}) returning one tensor. Errors: another number of inputs; the
// loss function's errors.
//
// A module's weight tensors (class weights, pos_weight) may live on any device: each call uses a copy on the input's
// device (none when they are there already), so one module serves replicas on several devices.

#include <string>
#include <vector>

#include "tandem/nn/loss_functions.h"
#include "tandem/nn/module.h"

namespace tandem::nn {

class MSELoss : public Cloneable<MSELoss> {
 public:
  explicit MSELoss(Reduction reduction = Reduction::Mean) : reduction_(reduction) {}
  std::vector<Tensor> forward_all(const std::vector<Tensor>& inputs) override;
  std::string extra_repr() const override;
  Reduction reduction() const { return reduction_; }

 private:
  Reduction reduction_;
};

class L1Loss : public Cloneable<L1Loss> {
 public:
  explicit L1Loss(Reduction reduction = Reduction::Mean) : reduction_(reduction) {}
  std::vector<Tensor> forward_all(const std::vector<Tensor>& inputs) override;
  std::string extra_repr() const override;
  Reduction reduction() const { return reduction_; }

 private:
  Reduction reduction_;
};

class SmoothL1Loss : public Cloneable<SmoothL1Loss> {
 public:
  explicit SmoothL1Loss(SmoothL1LossOptions options = {}) : options_(options) {}
  std::vector<Tensor> forward_all(const std::vector<Tensor>& inputs) override;
  std::string extra_repr() const override;
  const SmoothL1LossOptions& options() const { return options_; }

 private:
  SmoothL1LossOptions options_;
};

class BCEWithLogitsLoss : public Cloneable<BCEWithLogitsLoss> {
 public:
  explicit BCEWithLogitsLoss(BCEWithLogitsLossOptions options = {}) : options_(std::move(options)) {}
  std::vector<Tensor> forward_all(const std::vector<Tensor>& inputs) override;
  std::string extra_repr() const override;
  const BCEWithLogitsLossOptions& options() const { return options_; }

 private:
  BCEWithLogitsLossOptions options_;
};

class NLLLoss : public Cloneable<NLLLoss> {
 public:
  explicit NLLLoss(NLLLossOptions options = {}) : options_(std::move(options)) {}
  std::vector<Tensor> forward_all(const std::vector<Tensor>& inputs) override;
  std::string extra_repr() const override;
  const NLLLossOptions& options() const { return options_; }

 private:
  NLLLossOptions options_;
};

class CrossEntropyLoss : public Cloneable<CrossEntropyLoss> {
 public:
  explicit CrossEntropyLoss(CrossEntropyLossOptions options = {}) : options_(std::move(options)) {}
  std::vector<Tensor> forward_all(const std::vector<Tensor>& inputs) override;
  std::string extra_repr() const override;
  const CrossEntropyLossOptions& options() const { return options_; }

 private:
  CrossEntropyLossOptions options_;
};

}  // namespace tandem::nn
