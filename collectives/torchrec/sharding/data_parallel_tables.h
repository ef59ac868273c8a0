// A sharded collection's data_parallel tables: every rank holds them whole and looks up its own
// samples, so their sparse gradients differ per rank and are averaged before a step -- the
// "dense optimizer path" of torchrec's data-parallel tables, here with each table's own
// SparseOptimizer of the collection's fused config.
#pragma once

#include <ferry/collectives/torchrec/modules/fused_optimizer.h>
#include <ferry/collectives/torchrec/sharding/sharded_tables.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ferry::torchrec::detail {

// This rank's copies of the data_parallel tables, in config order.
std::vector<std::shared_ptr<EmbeddingTable>> data_parallel_tables(const ShardedTables& tables);
// Whether there is any (without building the list: asked at every step).
bool has_data_parallel_tables(const ShardedTables& tables);
// The collective average of their accumulated sparse gradients (sum over ranks / W of the
// dense gradients; rows touched on any rank stay touched), left as each table's sparse_grad().
void reduce_data_parallel_gradients(const ShardedTables& tables);

// The optimizers of the data_parallel tables, made on first use (a step, or loading a state).
class DataParallelOptimizers {
 public:
  // reduce_data_parallel_gradients, then steps each data_parallel table with its optimizer.
  // Throws InvalidArgument when the collection has no fused config. Collective.
  void step(const ShardedTables& tables);
  // The optimizer of table `config` (a data_parallel table), made with `fused` on first use.
  SparseOptimizer& get(const EmbeddingBagConfig& config, const FusedOptimizerConfig& fused);
  // The table's optimizer, or null before its first step or load.
  const SparseOptimizer* find(const std::string& table) const;

 private:
  std::map<std::string, SparseOptimizer> optimizers_;
};

}  // namespace ferry::torchrec::detail
