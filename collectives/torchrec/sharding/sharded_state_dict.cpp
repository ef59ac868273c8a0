#include <ferry/collectives/torchrec/sharding/sharded_state_dict.h>

#include <ferry/collectives/collectives.h>
#include <ferry/runtime/error.h>

namespace ferry::torchrec::detail {

std::map<std::string, Tensor> state_dict(const ShardedTables& tables) {
  std::map<std::string, Tensor> out;
  for (const auto& t : tables.tables()) {
    const std::string key = tables.state_prefix() + "." + t.config.name + ".weight";
    if (t.sharding.sharding_type == ShardingType::DATA_PARALLEL) {
      out[key] = t.tables.front()->weight().value().clone();
      continue;
    }
    // Every element is held by exactly one shard: zeros elsewhere, summed over the ranks.
    Tensor full = zeros({t.config.num_embeddings, t.config.embedding_dim}, t.config.data_type);
    for (size_t s = 0; s < t.shards.size(); ++s) {
      const ShardMetadata& m = t.shards[s];
      if (m.rows() == 0 || m.cols() == 0) continue;
      for (int64_t r = 0; r < m.rows(); ++r)
        full.select(m.row_offset() + r).narrow(0, m.col_offset(), m.cols())
            .copy_(t.tables[s]->weight().value().select(r));
    }
    if (tables.world().size() > 1) all_reduce(full, tables.world()).wait();
    out[key] = full;
  }
  return out;
}

std::map<std::string, std::vector<LocalShard>> local_state_dict(const ShardedTables& tables) {
  std::map<std::string, std::vector<LocalShard>> out;
  for (const auto& t : tables.tables()) {
    auto& v = out[tables.state_prefix() + "." + t.config.name + ".weight"];
    for (size_t s = 0; s < t.shards.size(); ++s)
      v.push_back({t.shards[s], t.tables[s]->weight().value()});
  }
  return out;
}

void load_state_dict(const ShardedTables& tables, const std::map<std::string, Tensor>& state) {
  const std::string w = tables.name() + "::load_state_dict";
  for (const auto& t : tables.tables()) {
    const std::string key = tables.state_prefix() + "." + t.config.name + ".weight";
    auto it = state.find(key);
    FERRY_CHECK(it != state.end(), InvalidArgument, w, ": the state has no \"", key, "\"");
    const Tensor& full = it->second;
    FERRY_CHECK(full.defined() && full.dim() == 2 && full.size(0) == t.config.num_embeddings &&
                    full.size(1) == t.config.embedding_dim,
                InvalidArgument, w, ": \"", key, "\" must be [", t.config.num_embeddings, ", ",
                t.config.embedding_dim, "], given ",
                full.defined() ? shape_str(full.shape()) : std::string("an undefined tensor"));
    for (size_t s = 0; s < t.shards.size(); ++s) {
      Tensor dst = t.tables[s]->weight().value();
      if (dst.numel() == 0) continue;
      dst.copy_(cut_shard(full, t.shards[s]).to(dst.dtype()));
    }
  }
}

}  // namespace ferry::torchrec::detail
