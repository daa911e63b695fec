// tandem's optimizers, LR schedulers and clip_grad_norm_ replaying PyTorch's own results: the file that
// tests/nn/torch_replay/make_replay.py writes where PyTorch is installed (float64 trajectories of torch.optim.Adam
// and AdamW, the lrs of torch.optim.lr_scheduler's schedulers, torch.nn.utils.clip_grad_norm_'s results). The
// environment variable TANDEM_TORCH_REPLAY names the file (nn/torch_replay/replay_file.h); without it the tests skip.
#include <limits>

#include "nn/torch_replay/replay_file.h"
#include "support/test_support.h"

namespace tandem {
namespace {

using Json = nlohmann::json;
using testing::expect_values;

std::vector<float> floats(const Json& values) { return values.get<std::vector<float>>(); }

template <bool kDecoupled>
void replay_optimizer(const Json& file, const Json& c) {
  std::vector<Tensor> params;
  std::vector<Tensor> targets, scales;
  for (const Json& spec : file["parameters"]) {
    const Shape shape = spec["shape"].get<Shape>();
    params.push_back(Tensor::from_vector(floats(spec["start"]), shape).set_requires_grad(true));
    targets.push_back(Tensor::from_vector(floats(spec["target"]), shape));
    scales.push_back(Tensor::from_vector(floats(spec["scale"]), shape));
  }
  std::vector<optim::ParamGroup<optim::AdamFamilyOptions<kDecoupled>>> groups;
  for (const Json& g : c["groups"]) {
    auto& group = groups.emplace_back();
    for (const Json& index : g["params"]) group.parameters.push_back(params[index.get<size_t>()]);
    group.options = optim::AdamFamilyOptions<kDecoupled>{.lr = g["lr"],
                                                         .betas = {g["betas"][0], g["betas"][1]},
                                                         .eps = g["eps"],
                                                         .weight_decay = g["weight_decay"],
                                                         .amsgrad = g["amsgrad"]};
  }
  optim::AdamFamily<kDecoupled> optimizer(groups, {});
  const Json& trajectory = c["trajectory"];
  for (size_t step = 0; step < trajectory.size(); ++step) {
    optimizer.zero_grad();
    for (size_t i = 0; i < params.size(); ++i) {
      Tensor difference = params[i] - targets[i];
      (sum(scales[i] * difference * difference) * 0.5f).backward();
    }
    optimizer.step();
    for (size_t i = 0; i < params.size(); ++i) {
      SCOPED_TRACE(c["name"].get<std::string>() + " step " + std::to_string(step + 1) + " parameter " +
                   std::to_string(i));
      expect_values(params[i], trajectory[step][i].get<std::vector<double>>(), params[i].shape(), 1e-5, 1e-5);
    }
  }
}

TEST(TorchReplay, AdamAndAdamWFollowPyTorchsTrajectories) {
  TANDEM_REQUIRE_REPLAY(file);
  ASSERT_FALSE((*file)["optimizers"].empty());
  for (const Json& c : (*file)["optimizers"]) {
    if (c["class"] == "Adam") {
      replay_optimizer<false>(*file, c);
    } else {
      ASSERT_EQ(c["class"], "AdamW");
      replay_optimizer<true>(*file, c);
    }
  }
}

std::unique_ptr<optim::LRScheduler> make_scheduler(optim::Optimizer& optimizer, const Json& spec,
                                                   std::vector<std::unique_ptr<optim::LRScheduler>>& children) {
  const std::string kind = spec["kind"];
  if (kind == "StepLR")
    return std::make_unique<optim::StepLR>(optimizer, spec["step_size"].get<int64_t>(), spec["gamma"].get<double>());
  if (kind == "CosineAnnealingLR") {
    return std::make_unique<optim::CosineAnnealingLR>(optimizer, spec["t_max"].get<int64_t>(),
                                                      spec["eta_min"].get<double>());
  }
  if (kind == "LinearLR") {
    return std::make_unique<optim::LinearLR>(optimizer, spec["start_factor"].get<double>(),
                                             spec["end_factor"].get<double>(), spec["total_iters"].get<int64_t>());
  }
  EXPECT_EQ(kind, "SequentialLR");
  std::vector<const optim::LRScheduler*> sequence;
  for (const Json& child : spec["schedulers"]) {
    children.push_back(make_scheduler(optimizer, child, children));
    sequence.push_back(children.back().get());
  }
  return std::make_unique<optim::SequentialLR>(optimizer, sequence, spec["milestones"].get<std::vector<int64_t>>());
}

TEST(TorchReplay, SchedulersSetPyTorchsLearningRates) {
  TANDEM_REQUIRE_REPLAY(file);
  for (const Json& spec : (*file)["schedulers"]) {
    const std::vector<double> base_lrs = spec["base_lrs"];
    std::vector<optim::ParamGroup<optim::SGDOptions>> groups;
    for (double lr : base_lrs)
      groups.push_back(
          {.parameters = {Tensor::zeros({1}).set_requires_grad(true)}, .options = optim::SGDOptions{.lr = lr}});
    optim::SGD sgd(groups, {});
    std::vector<std::unique_ptr<optim::LRScheduler>> children;
    const std::unique_ptr<optim::LRScheduler> scheduler = make_scheduler(sgd, spec, children);
    const Json& lrs = spec["lrs"];
    for (size_t epoch = 0; epoch < lrs.size(); ++epoch) {
      if (epoch > 0) scheduler->step();
      for (size_t group = 0; group < base_lrs.size(); ++group) {
        const double expected = lrs[epoch][group];
        EXPECT_NEAR(sgd.lr(group), expected, 1e-12 * std::max(1.0, std::abs(expected)))
            << spec["name"] << " epoch " << epoch << " group " << group;
      }
    }
  }
}

TEST(TorchReplay, ClipGradNormGivesPyTorchsTotalsAndGradients) {
  TANDEM_REQUIRE_REPLAY(file);
  for (const Json& spec : (*file)["clips"]) {
    const double norm_type =
        spec["norm_type"] == "inf" ? std::numeric_limits<double>::infinity() : spec["norm_type"].get<double>();
    std::vector<Tensor> params;
    for (const Json& grad : spec["grads"]) {
      const std::vector<float> values = floats(grad);
      Tensor p = Tensor::zeros({static_cast<int64_t>(values.size())}).set_requires_grad(true);
      p.set_grad(Tensor::from_vector(values, p.shape()));
      params.push_back(p);
    }
    const Tensor total = nn::utils::clip_grad_norm_(params, spec["max_norm"].get<double>(), norm_type);
    const double expected = spec["total"];
    EXPECT_NEAR(total.item(), expected, 1e-6 * expected) << "norm_type " << norm_type;
    for (size_t i = 0; i < params.size(); ++i) {
      SCOPED_TRACE("norm_type " + std::to_string(norm_type) + " gradient " + std::to_string(i));
      expect_values(params[i].grad(), spec["clipped"][i].get<std::vector<double>>(), params[i].shape(), 1e-6, 1e-7);
    }
  }
}

}  // namespace
}  // namespace tandem
