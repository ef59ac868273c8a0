// ferry: the umbrella header. Link with `pkg-config --libs ferry`.
#pragma once

#include <ferry/runtime/awaitable.h>
#include <ferry/runtime/block_cache.h>
#include <ferry/runtime/build_info.h>
#include <ferry/runtime/config.h>
#include <ferry/runtime/dtype.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/intra_op.h>
#include <ferry/runtime/log.h>
#include <ferry/runtime/tensor.h>
#include <ferry/runtime/version.h>
#include <ferry/runtime/work.h>

#include <ferry/autograd/function.h>
#include <ferry/autograd/gradcheck.h>
#include <ferry/autograd/grad_mode.h>
#include <ferry/autograd/ops.h>
#include <ferry/autograd/optimizer.h>
#include <ferry/autograd/variable.h>

#include <ferry/backends/transport.h>
#include <ferry/backends/local/local_transport.h>
#include <ferry/backends/rendezvous/store.h>

#include <ferry/collectives/algorithm_table.h>
#include <ferry/collectives/checkpoint/checkpoint.h>
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/ddp/gradient_reducer.h>
#include <ferry/collectives/differentiable/all_to_all_async.h>
#include <ferry/collectives/differentiable/differentiable.h>
#include <ferry/collectives/differentiable/distributed_gradcheck.h>
#include <ferry/collectives/differentiable/req_wait.h>
#include <ferry/collectives/group.h>
#include <ferry/collectives/init.h>
#include <ferry/collectives/run_ranks.h>

// The seed families, one namespace each.
#include <ferry/collectives/fairchem/fairchem.h>
#include <ferry/collectives/ksuit/ksuit.h>
#include <ferry/collectives/poptorch/poptorch.h>
#include <ferry/collectives/towhee/towhee.h>
#include <ferry/collectives/torchrec/torchrec.h>
