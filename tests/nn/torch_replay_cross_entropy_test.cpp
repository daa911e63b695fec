// cross_entropy replaying PyTorch's own float64 values and gradients (the "cross_entropy" part of the file that
// tests/nn/torch_replay/make_replay.py writes): fixed logits, a row of them near 1e4, with class weights,
// ignore_index, label smoothing, every reduction and class-probability targets. Skipped without TANDEM_TORCH_REPLAY.
#include "nn/torch_replay/replay_file.h"
#include "support/test_support.h"

namespace tandem {
namespace {

using Json = nlohmann::json;
using testing::expect_values;

class TorchReplayCrossEntropy : public testing::EveryDevice {};

nn::Reduction reduction_of(const std::string& name) {
  if (name == "none") return nn::Reduction::None;
  if (name == "sum") return nn::Reduction::Sum;
  EXPECT_EQ(name, "mean");
  return nn::Reduction::Mean;
}

// A [rows, columns] float32 tensor from a JSON list of rows.
Tensor matrix(const Json& rows, Device device) {
  std::vector<float> values;
  for (const Json& row : rows)
    for (const Json& v : row) values.push_back(v.get<float>());
  const auto n = static_cast<int64_t>(rows.size());
  return Tensor::from_vector(values, {n, static_cast<int64_t>(values.size()) / n}, device);
}

TEST_P(TorchReplayCrossEntropy, ValuesAndGradientsEqualPyTorchs) {
  TANDEM_REQUIRE_REPLAY(file);
  const Json& replay = (*file)["cross_entropy"];
  ASSERT_FALSE(replay["cases"].empty());
  const Tensor logits = matrix(replay["logits"], device());
  const int64_t n = logits.size(0), c = logits.size(1);
  for (const Json& k : replay["cases"]) {
    SCOPED_TRACE(k["name"].get<std::string>());
    const Json& targets = k["targets"];
    const Tensor target = targets[0].is_array()
                              ? matrix(targets, device())
                              : Tensor::from_vector(targets.get<std::vector<int64_t>>(), {n}, device());
    const Tensor weight =
        k["weight"].is_null() ? Tensor() : Tensor::from_vector(k["weight"].get<std::vector<float>>(), {c}, device());
    const nn::Reduction reduction = reduction_of(k["reduction"]);
    const Tensor x = logits.detach().set_requires_grad(true);
    const Tensor loss = nn::cross_entropy(x, target,
                                          {.weight = weight,
                                           .ignore_index = k["ignore_index"].get<int64_t>(),
                                           .reduction = reduction,
                                           .label_smoothing = k["label_smoothing"].get<double>()});
    const bool rows = reduction == nn::Reduction::None;
    const std::vector<double> expected =
        rows ? k["loss"].get<std::vector<double>>() : std::vector<double>{k["loss"].get<double>()};
    // Row losses reach 2e4 (log-probabilities of the row near 1e4), where float32 holds 3 decimals.
    expect_values(loss, expected, rows ? Shape{n} : Shape{}, 1e-5, 1e-5);
    loss.backward(rows ? Tensor::from_vector(replay["cotangent"].get<std::vector<float>>(), {n}, device()) : Tensor());
    std::vector<double> grad;
    for (const Json& row : k["grad"])
      for (const Json& v : row) grad.push_back(v.get<double>());
    expect_values(x.grad(), grad, {n, c}, 1e-5, 1e-6);
  }
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(TorchReplayCrossEntropy);

}  // namespace
}  // namespace tandem
