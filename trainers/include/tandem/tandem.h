#pragma once
// Everything tandem offers, in one include. Each layer has its own aggregate header as well.

#include "tandem/core.h"
#include "tandem/nn.h"
#include "tandem/comm.h"
#include "tandem/parallel.h"
#include "tandem/trainers.h"
