// ferry-embedding-bench --sharded: the training-step time of a ShardedEmbeddingBagCollection per
// sharding type, on W ranks of the local transport (threads).
#pragma once

namespace ferry::embedding_bench {

// Parses its own options (argv as given to main, "--sharded" among them) and runs the benchmark.
// Returns the exit code: 0, 1 when a sharded forward differs from the unsharded collection's,
// 2 for bad options.
int run_sharded_step_bench(int argc, char** argv);

}  // namespace ferry::embedding_bench
