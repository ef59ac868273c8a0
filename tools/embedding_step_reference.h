// The unsharded side of ferry-embedding-bench --sharded: what every sharded forward is checked
// against, and the per-core lookup references its lookup throughput is read against.
#pragma once

#include "collectives/group.h"
#include "collectives/torchrec/torchrec.h"
#include "runtime/tensor.h"

#include <cstdint>
#include <vector>

namespace ferry::embedding_bench {

struct UnshardedReference {
  // [W*B, sum of dims] float32, on every rank: EmbeddingBagCollection(configs, false, seed)
  // .forward(global batch), keys in config order.
  Tensor pooled;
  double max_abs = 0;  // max |pooled|, the scale of the check's tolerance
  // Ids per second per rank (ids of every table's dim; ranks running concurrently, as the
  // sharded lookups do), median of `reps`, averaged over the ranks that own tables: a plain
  // Eigen gather-and-sum loop, and the unsharded lookup (pooled_embedding_lookup, no tape).
  double eigen_ids_per_s = 0;
  double lookup_ids_per_s = 0;
};

// Collective over `world`. Rank r builds the unsharded collection of tables r, r + W, ... only
// (a table's initial values depend on its name and the seed, not on its neighbours, so each
// rank holds 1/W of the weights instead of all of them), pools the global batch through it and
// through the Eigen loop, and one all_reduce assembles the full output on every rank.
UnshardedReference unsharded_reference(const std::vector<torchrec::EmbeddingBagConfig>& configs,
                                       const torchrec::KeyedJaggedTensor& global, uint64_t seed,
                                       const Group& world, int reps);

}  // namespace ferry::embedding_bench
