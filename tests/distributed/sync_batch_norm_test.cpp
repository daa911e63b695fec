// parallel::convert_sync_batchnorm across the processes of a job (one virtual CPU device each): every rank feeding
// its shard of one batch gets the outputs, input gradients, parameter gradients and running statistics of the plain
// layer on the whole batch in one process (the reference, which each rank computes itself). Run alone (no launcher)
// the group has one process and the same expectations hold.

#include <chrono>
#include <functional>

#include "support/test_support.h"
#include "tandem/comm/process_group.h"

namespace tandem::testing {
namespace {

class SyncBatchNormAcrossProcesses : public ::testing::Test {
 protected:
  void SetUp() override {
    group_ = comm::ProcessGroup::from_environment({Device::cpu(0)}, {.timeout = std::chrono::seconds(60)});
  }
  void TearDown() override { group_.reset(); }

  // Rows [begin, end) of x.
  static Tensor rows(const Tensor& x, int64_t begin, int64_t end) {
    return index_select(x, 0, Tensor::arange(begin, end));
  }

  // Rank r's shard has rows_of(r) rows; two training steps of a bare BatchNorm2d with the loss sum(out * probe).
  void expect_shards_give_the_whole_batch(const std::function<int64_t(int rank)>& rows_of) {
    const int size = group_->size();
    const int rank = group_->rank();
    int64_t begin = 0, total = 0;
    for (int r = 0; r < size; ++r) {
      if (r == rank) begin = total;
      total += rows_of(r);
    }
    const int64_t end = begin + rows_of(rank);

    manual_seed(11);
    auto reference = std::make_shared<nn::BatchNorm2d>(3);
    {
      NoGradGuard no_grad;
      reference->weight.copy_(Tensor::uniform({3}, 0.5f, 1.5f));
      reference->bias.copy_(Tensor::uniform({3}, -0.5f, 0.5f));
    }
    auto synced = std::static_pointer_cast<nn::BatchNorm2d>(reference->clone());
    parallel::convert_sync_batchnorm(synced, group_);

    for (int step = 0; step < 2; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      const Tensor x = Tensor::randn({total, 3, 4, 3}) * 3.0f + 2.0f;  // the same draws on every rank
      const Tensor probe = Tensor::randn({total, 3, 4, 3});
      Tensor whole = x.clone();
      whole.set_requires_grad(true);
      const Tensor expected = reference->forward(whole);
      sum(expected * probe).backward();

      Tensor shard = rows(x, begin, end);
      shard.set_requires_grad(true);
      const Tensor out = synced->forward(shard);
      sum(out * rows(probe, begin, end)).backward();

      expect_close(out.detach(), rows(expected.detach(), begin, end), 1e-5, 1e-5);
      expect_close(shard.grad(), rows(whole.grad(), begin, end), 1e-5, 1e-5);
      // Each rank's parameter gradients are its shard's part: their sum over the group is the whole batch's.
      std::vector<Tensor> weight_grad{synced->weight.grad().clone()}, bias_grad{synced->bias.grad().clone()};
      group_->all_reduce(weight_grad);
      group_->all_reduce(bias_grad);
      expect_close(weight_grad[0], reference->weight.grad(), 1e-5, 1e-5);
      expect_close(bias_grad[0], reference->bias.grad(), 1e-5, 1e-5);
      reference->zero_grad();
      synced->zero_grad();
    }
    expect_close(synced->running_mean, reference->running_mean, 1e-5, 1e-6);
    expect_close(synced->running_var, reference->running_var, 1e-5, 1e-6);
  }

  std::shared_ptr<comm::ProcessGroup> group_;
};

TEST_F(SyncBatchNormAcrossProcesses, UnevenShardsGiveTheLayerOnTheWholeBatch) {
  expect_shards_give_the_whole_batch([](int rank) { return int64_t{rank} + 2; });
}

// A process with no rows of a batch (as DistributedDataParallel's processes pass then) adds nothing to the sums.
TEST_F(SyncBatchNormAcrossProcesses, AProcessWithoutRowsTakesPart) {
  const int size = group_->size();
  expect_shards_give_the_whole_batch([size](int rank) { return rank == 0 && size > 1 ? int64_t{0} : int64_t{3}; });
}

// Under DistributedDataParallel (the gradients averaged over the processes), equal shards of a Linear followed by a
// BatchNorm1d: the parameter gradients of the mean of the ranks' losses sum(out * probe), those of the plain model on
// the whole batch with the loss divided by the number of processes.
TEST_F(SyncBatchNormAcrossProcesses, UnderDistributedDataParallelEqualsOneProcess) {
  const int64_t per_rank = 3;
  const int64_t total = per_rank * group_->size();
  const int64_t begin = per_rank * group_->rank();
  manual_seed(12);
  auto reference = std::make_shared<nn::Sequential>(nn::Linear(5, 4), nn::BatchNorm1d(4));
  auto net = std::static_pointer_cast<nn::Sequential>(reference->clone());
  parallel::convert_sync_batchnorm(net, group_);
  parallel::DistributedDataParallel ddp(net, group_);

  const Tensor x = Tensor::randn({total, 5});
  const Tensor probe = Tensor::randn({total, 4});
  sum(reference->forward(x) * probe).backward();
  sum(ddp.forward(rows(x, begin, begin + per_rank)) * rows(probe, begin, begin + per_rank)).backward();

  const auto expected = reference->named_parameters();
  const auto actual = net->named_parameters();
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    SCOPED_TRACE(expected[i].first);
    expect_close(actual[i].second.grad(), expected[i].second.grad() * static_cast<float>(1.0 / group_->size()), 1e-5,
                 1e-6);
  }
  const auto expected_buffers = reference->named_buffers();
  const auto actual_buffers = net->named_buffers();
  for (size_t i = 0; i + 1 < expected_buffers.size(); ++i) {  // the running statistics (not the int64 count)
    SCOPED_TRACE(expected_buffers[i].first);
    expect_close(actual_buffers[i].second, expected_buffers[i].second, 1e-5, 1e-6);
  }
}

}  // namespace
}  // namespace tandem::testing
