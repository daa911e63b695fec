#pragma once
// parallel: data parallelism over devices (torch.nn.parallel semantics, see docs/comm.md): differentiable
// broadcast / reduce / scatter / gather, replicate, parallel_apply, data_parallel and DataParallel,
// DistributedDataParallel with its sharded optimizers (ZeRO stages 1 and 2: ShardedSGD, ShardedAdam, ShardedAdamW),
// Join (uneven inputs), convert_sync_batchnorm (batch statistics over every process), and the fast training path
// (ReplicatedModule with its GradientReducer, ReplicatedOptimizer and its SGD and Adam forms, and TrainingStep, the one
// training step: eager, steps in backward, or one CUDA graph).

#include "tandem/parallel/data_parallel.h"
#include "tandem/parallel/distributed.h"
#include "tandem/parallel/functions.h"
#include "tandem/parallel/gradient_layout.h"
#include "tandem/parallel/gradient_reducer.h"
#include "tandem/parallel/join.h"
#include "tandem/parallel/parallel_apply.h"
#include "tandem/parallel/replicate.h"
#include "tandem/parallel/replicated.h"
#include "tandem/parallel/replicated_optimizer.h"
#include "tandem/parallel/scatter_gather.h"
#include "tandem/parallel/sharded_optimizer.h"
#include "tandem/parallel/sync_batch_norm.h"
#include "tandem/parallel/training_step.h"
