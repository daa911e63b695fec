#pragma once
// comm: device-to-device communication (broadcast, reduce_add, scatter, gather, coalesced variants, all_reduce) and
// process groups (collectives over the devices of several processes).

#include "tandem/comm/comm.h"
#include "tandem/comm/process_group.h"
