// The fused optimizers' state of a sharded collection as whole tables, and back: what a
// checkpoint needs to resume training on another plan or world size with the same optimizer
// trajectory (optimizer_state_dict / load_optimizer_state_dict in sharded_state_dict.h).
//
// Gathering follows the weights' state_dict: each rank writes its shards' state into a
// zero tensor of the whole table and an all_reduce sums them (every element is held by exactly
// one shard). Every rank runs the same collectives in table order, whatever it holds.
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/torchrec/sharding/sharded_state_dict.h>
#include <ferry/collectives/torchrec/utils/format.h>
#include <ferry/runtime/error.h>

#include <algorithm>

namespace ferry::torchrec::detail {
namespace {

bool is_rowwise(EmbOptimType t) { return t == EmbOptimType::ExactRowwiseAdagrad; }
bool has_momentum1(EmbOptimType t) { return t != EmbOptimType::Sgd; }
bool has_momentum2(EmbOptimType t) { return t == EmbOptimType::Adam; }

// The first column of each column block of the table's plan, ascending.
std::vector<int64_t> column_blocks(const ShardedTable& t) {
  std::vector<int64_t> starts;
  for (const ShardMetadata& m : t.sharding.sharding_spec) starts.push_back(m.col_offset());
  if (starts.empty()) starts.push_back(0);  // data_parallel: one block
  std::sort(starts.begin(), starts.end());
  starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
  return starts;
}

int64_t block_index(const std::vector<int64_t>& starts, int64_t col) {
  return std::lower_bound(starts.begin(), starts.end(), col) - starts.begin();
}

Tensor int64_tensor(const std::vector<int64_t>& values) {
  Tensor t = empty({static_cast<int64_t>(values.size())}, DType::Int64);
  for (size_t i = 0; i < values.size(); ++i) t.set_flat(static_cast<int64_t>(i), values[i]);
  return t;
}

// One optimizer's state put whole: element-wise state at the shard's block, row-wise state in
// column `block` of the [rows, k] tensor.
void place(const Tensor& state, const ShardMetadata& m, int64_t block, Tensor& full) {
  for (int64_t r = 0; r < m.rows(); ++r) {
    Tensor row = full.select(m.row_offset() + r);
    if (state.dim() == 1) {
      row.narrow(0, block, 1).copy_(state.narrow(0, r, 1));
    } else {
      row.narrow(0, m.col_offset(), m.cols()).copy_(state.select(r));
    }
  }
}

}  // namespace

std::map<std::string, Tensor> optimizer_state_dict(const ShardedTables& tables,
                                                   const DataParallelOptimizers& dp) {
  std::map<std::string, Tensor> out;
  if (!tables.fused()) return out;
  const EmbOptimType type = tables.fused()->optimizer;
  const Group& world = tables.world();
  for (const ShardedTable& t : tables.tables()) {
    const std::string key = tables.state_prefix() + "." + t.config.name + ".weight.";
    const int64_t R = t.config.num_embeddings, D = t.config.embedding_dim;
    const DType dtype = t.config.data_type;
    if (t.sharding.sharding_type == ShardingType::DATA_PARALLEL) {
      // Identical on every rank (stepped by the collective step_data_parallel): no gather.
      const SparseOptimizer* dp_opt = dp.find(t.config.name);
      if (dp_opt == nullptr) continue;
      const SparseOptimizer& opt = *dp_opt;
      out[key + "step"] = int64_tensor({opt.step_count()});
      if (has_momentum1(type)) {
        out[key + "momentum1"] =
            is_rowwise(type) ? opt.momentum1().reshape({R, 1}).clone() : opt.momentum1().clone();
        if (is_rowwise(type)) out[key + "momentum1.col_offsets"] = int64_tensor({0});
      }
      if (has_momentum2(type)) out[key + "momentum2"] = opt.momentum2().clone();
      continue;
    }
    if (t.sharding.compute_kernel == EmbeddingComputeKernel::DENSE) continue;  // not fused

    int64_t step = 0;
    for (const auto& table : t.tables)
      if (const SparseOptimizer* opt = table->fused_optimizer())
        step = std::max(step, opt->step_count());
    Tensor steps = int64_tensor({step});
    if (world.size() > 1) all_reduce(steps, world, ReduceOp::Max).wait();
    out[key + "step"] = steps;

    const std::vector<int64_t> blocks = column_blocks(t);
    const auto gather = [&](const char* name, auto state_of) {
      const Shape shape = is_rowwise(type) && std::string(name) == "momentum1"
                              ? Shape{R, static_cast<int64_t>(blocks.size())}
                              : Shape{R, D};
      Tensor full = zeros(shape, dtype);
      for (size_t s = 0; s < t.shards.size(); ++s) {
        const SparseOptimizer* opt = t.tables[s]->fused_optimizer();
        if (opt == nullptr || t.shards[s].rows() == 0 || t.shards[s].cols() == 0) continue;
        place(state_of(*opt), t.shards[s], block_index(blocks, t.shards[s].col_offset()), full);
      }
      if (world.size() > 1) all_reduce(full, world).wait();
      out[key + name] = full;
    };
    if (has_momentum1(type)) {
      gather("momentum1", [](const SparseOptimizer& o) { return o.momentum1(); });
      if (is_rowwise(type)) out[key + "momentum1.col_offsets"] = int64_tensor(blocks);
    }
    if (has_momentum2(type))
      gather("momentum2", [](const SparseOptimizer& o) { return o.momentum2(); });
  }
  return out;
}

void load_optimizer_state_dict(const ShardedTables& tables, DataParallelOptimizers& dp_optimizers,
                               const std::map<std::string, Tensor>& state) {
  if (!tables.fused()) return;
  const std::string w = tables.name() + "::load_optimizer_state_dict";
  const EmbOptimType type = tables.fused()->optimizer;
  const Group& world = tables.world();
  const auto find = [&](const std::string& key) -> const Tensor& {
    auto it = state.find(key);
    FERRY_CHECK(it != state.end() && it->second.defined(), InvalidArgument,
                where(w.c_str(), world), ": the state has no \"", key, "\" (", emb_optim_type_name(type),
                " keeps it)");
    return it->second;
  };
  for (const ShardedTable& t : tables.tables()) {
    const bool dp = t.sharding.sharding_type == ShardingType::DATA_PARALLEL;
    if (!dp && t.sharding.compute_kernel == EmbeddingComputeKernel::DENSE) continue;
    const std::string key = tables.state_prefix() + "." + t.config.name + ".weight.";
    if (dp && state.find(key + "step") == state.end()) continue;  // saved before its first step
    const Tensor& step_t = find(key + "step");
    FERRY_CHECK(step_t.numel() == 1, InvalidArgument, w, ": \"", key, "step\" must hold one value");
    const int64_t step = static_cast<int64_t>(step_t.get_flat(0));
    const Tensor m1 = has_momentum1(type) ? find(key + "momentum1") : Tensor();
    const Tensor m2 = has_momentum2(type) ? find(key + "momentum2") : Tensor();
    std::vector<int64_t> saved_blocks;
    if (is_rowwise(type)) {
      // A file format may have stored the offsets as floats (ferry-dlrm's does: exact).
      saved_blocks =
          find(key + "momentum1.col_offsets").to(DType::Int64).to_vector<int64_t>();
      FERRY_CHECK(m1.dim() == 2 && m1.size(1) == static_cast<int64_t>(saved_blocks.size()),
                  InvalidArgument, w, ": \"", key, "momentum1\" must be [rows, ",
                  saved_blocks.size(), "] (one column per saved column block), given ",
                  shape_str(m1.shape()));
    }
    // The state of one shard of this plan, cut from the whole-table tensors.
    const auto shard_state = [&](const ShardMetadata& m, Tensor& s1, Tensor& s2) {
      if (m2.defined()) s2 = m2.narrow_copy(0, m.row_offset(), m.rows())
                                 .narrow_copy(1, m.col_offset(), m.cols());
      if (!m1.defined()) return;
      if (!is_rowwise(type)) {
        s1 = m1.narrow_copy(0, m.row_offset(), m.rows()).narrow_copy(1, m.col_offset(), m.cols());
        return;
      }
      // Row-wise: only the same column block carries over.
      const auto it = std::find(saved_blocks.begin(), saved_blocks.end(), m.col_offset());
      const size_t j = static_cast<size_t>(it - saved_blocks.begin());
      const int64_t saved_end =
          j + 1 < saved_blocks.size() ? saved_blocks[j + 1] : t.config.embedding_dim;
      FERRY_CHECK(it != saved_blocks.end() && saved_end == m.col_offset() + m.cols(),
                  InvalidArgument, where(w.c_str(), world), ": table \"", t.config.name,
                  "\": its EXACT_ROWWISE_ADAGRAD state was saved for column blocks starting at ",
                  list_str(saved_blocks), ", which do not include this plan's block [",
                  m.col_offset(), ", ", m.col_offset() + m.cols(),
                  "): a row's state of one block cannot be split or merged into others "
                  "exactly; resume with the same column split");
      s1 = m1.narrow_copy(0, m.row_offset(), m.rows()).narrow_copy(1, j, 1)
               .reshape({m.rows()});
    };
    const std::string what = w + ": table \"" + t.config.name + "\"";
    if (dp) {
      Tensor s1, s2;
      shard_state(ShardMetadata{{0, 0}, {t.config.num_embeddings, t.config.embedding_dim}, 0},
                  s1, s2);
      dp_optimizers.get(t.config, *tables.fused()).load_state(step, s1, s2, what);
      continue;
    }
    for (size_t s = 0; s < t.shards.size(); ++s) {
      SparseOptimizer* opt = t.tables[s]->fused_optimizer();
      if (opt == nullptr) continue;
      Tensor s1, s2;
      shard_state(t.shards[s], s1, s2);
      opt->load_state(step, s1, s2, what);
    }
  }
}

}  // namespace ferry::torchrec::detail
