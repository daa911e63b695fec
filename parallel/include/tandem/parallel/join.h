#pragma once
// Join: training on uneven inputs across the processes of a DistributedDataParallel, as PyTorch's
// torch.distributed.algorithms.Join. Each process iterates its own batches (its own data: a DataLoader without a
// DistributedSampler, whose drop_last = false leaves a short last batch, or files of different sizes), so the
// processes may hold different numbers of batches and rows. Every step starts with Join::next(rows): the processes
// tell each other how many rows they have this step, and the loop goes on while any has some. A process whose
// batches have run out shadows the others' step: it takes part in every gradient bucket's collective with zero
// gradients and steps its optimizer on the reduced gradients, so that every process ends the epoch with the same
// parameters and optimizer state, and none waits for another in a collective it will never issue.
//
//   parallel::Join join(*ddp);
//   auto batch = loader.begin();
//   while (join.next(batch != loader.end() ? batch->rows() : 0)) {
//     adamw.zero_grad();
//     if (join.joined()) {
//       join.shadow();
//     } else {
//       Tensor loss = nn::mse_loss((*ddp)(batch->features), batch->targets) * join.loss_weight();
//       loss.backward();
//       ++batch;
//     }
//     adamw.step();
//   }
//
// With parallel::TrainingStep over a summing DistributedDataParallel, a joined process steps on an empty batch, and
// every process passes the step's global rows: step({.features = x, .targets = y, .global_rows =
// join.global_rows()}), or step({.global_rows = join.global_rows()}) when joined.
//
// Note [Joining uneven inputs]: each step's gradient is the gradient of the mean loss over the rows that every
// process has in that step, the result one process would get on the concatenation of their batches. Each process's
// loss is the mean over its own rows, so loss_weight() scales it by its share: rows / global_rows when the model sums
// (DistributedOptions::reduction Sum), and rows * processes / global_rows when it averages (the reduction divides by
// the number of processes, joined ones included). When every process has equal rows the weight is exactly 1, so a
// Join over even inputs changes no bit of the result. PyTorch's Join instead lets the joined ranks skip the
// optimizer step and broadcasts the last rank's parameters at the end; here the joined processes step on the same
// reduced gradients as the others, so their optimizer state stays equal too, and nothing is broadcast.
//
// The decision is one ProcessGroup::exchange per step (a few bytes on the host, no device work): the loop ends on
// every process in the same step. A process that stops calling next() while the others go on leaves them waiting in
// the exchange, which the group's watchdog bounds (ProcessGroupOptions::timeout) like any collective.
//
// Requirements: every process constructs its Join over its DistributedDataParallel and calls next() once per step
// until it returns false; no_sync() accumulation does not mix with joined steps (shadow() refuses to run inside it).
// Batch norms that synchronize their statistics over the group (parallel::convert_sync_batchnorm) are refused: their
// reductions run inside forward, which a joined process does not run.

#include <cstdint>

#include "tandem/parallel/distributed.h"

namespace tandem::parallel {

class Join {
 public:
  // Errors: a model with synchronized batch norms.
  explicit Join(DistributedDataParallel& model);

  // Starts a step: this process has `rows` rows in it (0: its batches have run out; it joins this step). Collective
  // (one exchange through the model's group). Returns whether any process has rows: false on every process at the
  // same step, when all have run out. Errors: rows < 0; a call after next() returned false.
  bool next(int64_t rows);

  // The current step (after next() returned true).
  bool joined() const { return rows_ == 0; }  // this process has no rows: it shadows the step
  int64_t rows() const { return rows_; }
  int64_t global_rows() const { return global_rows_; }  // over every process
  int active_processes() const { return active_processes_; }
  int64_t steps() const { return steps_; }  // steps started by next() so far

  // What this process's mean loss is multiplied by (Note [Joining uneven inputs]). Errors: no step started;
  // a joined process (it has no loss).
  double loss_weight() const;

  // A joined process's part of the step: zeroes its gradients and takes part in every bucket's collective with them
  // (and in the buffers' broadcast, as a forward would), so the optimizer step that follows applies the reduced
  // gradients of the others. Errors: no step started; a process with rows; inside the model's no_sync().
  void shadow();

 private:
  void check_in_step(const char* caller) const;

  DistributedDataParallel& model_;
  int64_t rows_ = 0;
  int64_t global_rows_ = 0;
  int active_processes_ = 0;
  int64_t steps_ = 0;
  bool done_ = false;
};

}  // namespace tandem::parallel
