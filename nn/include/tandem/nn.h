#pragma once
// nn: modules, layers, losses, optimizers, save/load.

#include "tandem/nn/activation.h"
#include "tandem/nn/linear.h"
#include "tandem/nn/loss.h"
#include "tandem/nn/module.h"
#include "tandem/nn/sequential.h"
#include "tandem/nn/serialize.h"
#include "tandem/optim/optimizer.h"
#include "tandem/nn/training_mode_guard.h"
#include "tandem/optim/sgd.h"
