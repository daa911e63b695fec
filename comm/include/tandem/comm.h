#pragma once
// comm: device-to-device communication (broadcast, reduce_add, scatter, gather, coalesced variants, all_reduce).

#include "tandem/comm/comm.h"
