#pragma once
// Losses, as functions (loss_functions.h) and as modules (loss_modules.h).

#include "tandem/nn/loss_functions.h"
#include "tandem/nn/loss_modules.h"
