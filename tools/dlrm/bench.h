// ferry-dlrm --bench: the training step timed on its own. Warm-up steps, then timed steps on
// batches prepared before the timed loop (so data generation is not in the step), through the
// same pipeline, model and sharding as training. Prints one human line and one JSON line (rank
// 0): the step's median / min / p90 over the timed steps (each step's time being the slowest
// rank's), samples/s, the median of every stage, heap allocations per step and rank, and the
// compute limit this machine shows for the step's work (compute_limit.h) with the step's
// multiple of it.
#pragma once

#include "tools/dlrm/compute_limit.h"
#include "tools/dlrm/model.h"

namespace ferry::dlrm_tool {

// The compute limit of one rank's step of this model, `ids_per_rank` ids being looked up per
// step by each rank. Collective: the ranks measure at the same time, as they run their steps.
ComputeLimit step_compute_limit(const Options& o, const ShardedDlrm& m, double ids_per_rank,
                                Group& world);

// Collective over `world`. Returns the process exit status: 1 when the heap allocations per
// step and rank exceed o.max_allocs_per_step (if set), else 0.
int run_bench(const Options& o, Group& world);

}  // namespace ferry::dlrm_tool
