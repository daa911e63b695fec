#pragma once
// nn: modules, layers, losses, optimizers, save/load.

#include "tandem/nn/activation.h"
#include "tandem/nn/clip_grad.h"
#include "tandem/nn/linear.h"
#include "tandem/nn/loss.h"
#include "tandem/nn/module.h"
#include "tandem/nn/sequential.h"
#include "tandem/nn/serialize.h"
#include "tandem/optim/optimizer.h"
#include "tandem/nn/training_mode_guard.h"
#include "tandem/optim/adam.h"
#include "tandem/optim/lr_scheduler.h"
#include "tandem/optim/optimizer_state.h"
#include "tandem/optim/sgd.h"
