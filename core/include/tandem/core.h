#pragma once
// core: devices, tensors, ops, autograd, random, atomic file writes.

#include "tandem/core/atomic_file.h"
#include "tandem/core/autograd.h"
#include "tandem/core/device.h"
#include "tandem/core/error.h"
#include "tandem/core/fused.h"
#include "tandem/core/grad_mode.h"
#include "tandem/core/matmul_settings.h"
#include "tandem/core/ops.h"
#include "tandem/core/random.h"
#include "tandem/core/shape.h"
#include "tandem/core/splitmix64.h"
#include "tandem/core/storage.h"
#include "tandem/core/stream_marker.h"
#include "tandem/core/tensor.h"
