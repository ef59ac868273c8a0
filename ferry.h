// ferry: the umbrella header. Link with `pkg-config --libs ferry`.
#pragma once

#include "runtime/awaitable.h"
#include "runtime/block_cache.h"
#include "runtime/config.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/tensor.h"
#include "runtime/version.h"
#include "runtime/work.h"

#include "autograd/function.h"
#include "autograd/gradcheck.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "autograd/optimizer.h"
#include "autograd/variable.h"

#include "backends/transport.h"
#include "backends/local/local_transport.h"

#include "collectives/algorithm_table.h"
#include "collectives/collectives.h"
#include "collectives/ddp/gradient_reducer.h"
#include "collectives/differentiable/all_to_all_async.h"
#include "collectives/differentiable/differentiable.h"
#include "collectives/differentiable/distributed_gradcheck.h"
#include "collectives/differentiable/req_wait.h"
#include "collectives/group.h"
#include "collectives/init.h"
#include "collectives/run_ranks.h"

// The seed families, one namespace each.
#include "collectives/fairchem/fairchem.h"
#include "collectives/ksuit/ksuit.h"
#include "collectives/poptorch/poptorch.h"
#include "collectives/towhee/towhee.h"
#include "collectives/torchrec/torchrec.h"
