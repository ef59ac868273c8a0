// The unsharded side of ferry-embedding-bench --sharded: what every sharded forward is checked
// against, and the per-core lookup references its lookup throughput is read against.
#pragma once

#include <ferry/collectives/group.h>
#include <ferry/collectives/torchrec/torchrec.h>
#include <ferry/runtime/tensor.h>

#include <cstdint>
#include <vector>

namespace ferry::embedding_bench {

struct UnshardedReference {
  // [W*B, sum of dims] float32, on every rank: EmbeddingBagCollection(configs, false, seed)
  // .forward(globals[0]), keys in config order.
  Tensor pooled;
  double max_abs = 0;  // max |pooled|, the scale of the check's tolerance
  // Ids per second per rank (ids of every table's dim; ranks running concurrently, as the
  // sharded lookups do), median over the global batches (one pass each), averaged over the
  // ranks that own tables: a plain Eigen gather-and-sum loop, and the unsharded lookup
  // (EmbeddingBagCollection::forward without tape).
  double eigen_ids_per_s = 0;
  double lookup_ids_per_s = 0;
};

// Collective over `world`. Rank r builds the unsharded collection of tables r, r + W, ... only
// (a table's initial values depend on its name and the seed, not on its neighbours, so each
// rank holds 1/W of the weights instead of all of them), pools each global batch (all ranks'
// samples, rank-major) through it and through the Eigen loop, and one all_reduce assembles the
// full output of globals[0] on every rank.
UnshardedReference unsharded_reference(const std::vector<torchrec::EmbeddingBagConfig>& configs,
                                       const std::vector<torchrec::KeyedJaggedTensor>& globals,
                                       uint64_t seed, const Group& world);

}  // namespace ferry::embedding_bench
