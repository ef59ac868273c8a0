#include <ferry/collectives/torchrec/sharding/sharded_tables.h>

#include <ferry/collectives/collectives.h>
#include <ferry/collectives/torchrec/modules/vbe_pooling.h>
#include <ferry/collectives/torchrec/planner/plan_agreement.h>
#include <ferry/collectives/torchrec/utils/topology.h>
#include <ferry/runtime/error.h>

#include <algorithm>
#include <map>
#include <sstream>

namespace ferry::torchrec::detail {

namespace {

// The block [r0, r0 + nr) x [c0, c0 + nc) of `full` as a new contiguous tensor.
Tensor cut(const Tensor& full, const ShardMetadata& m) {
  return full.narrow_copy(0, m.row_offset(), m.rows()).narrow_copy(1, m.col_offset(), m.cols());
}

}  // namespace

ShardedTables::ShardedTables(std::vector<EmbeddingBagConfig> configs,
                             const ModuleShardingPlan& plan, Group world,
                             ShardedEmbeddingOptions options,
                             std::optional<FusedOptimizerConfig> fused, uint64_t seed,
                             const char* where, const char* state_prefix)
    : world_(std::move(world)), options_(options), fused_(fused), where_(where),
      prefix_(state_prefix) {
  FERRY_CHECK(world_.valid(), InvalidArgument, where, ": the world group is null");
  const int W = world_.size();
  local_size_ = options_.local_size > 0 ? options_.local_size : get_local_size(world_);
  FERRY_CHECK(W % local_size_ == 0, InvalidArgument, where, ": local_size ", local_size_,
              " does not divide the world size ", W);
  validate_tables(configs, where);
  if (fused_) validate(*fused_);
  std::vector<TableShape> shapes;
  for (const auto& c : configs) shapes.push_back({c.name, c.num_embeddings, c.embedding_dim});
  validate_module_plan(plan, shapes, W, local_size_);
  // Once, collectively: the same plan on every rank.
  check_plan_agreement(ShardingPlan({{"", plan}}), world_);
  if (options_.qcomms_config) codecs_ = get_qcomm_codecs(options_.qcomms_config);

  const int me = world_.rank();
  for (size_t i = 0; i < configs.size(); ++i) {
    ShardedTable t;
    t.config = configs[i];
    t.index = static_cast<int>(i);
    t.sharding = plan.at(configs[i].name);
    const TableShape shape = shapes[i];
    t.shards = t.sharding.shards_on_rank(me, shape);
    if (!t.shards.empty()) {
      const Tensor full = init_table_weight(t.config, seed);
      for (const auto& m : t.shards) {
        std::shared_ptr<EmbeddingTable> table;
        if (t.sharding.sharding_type == ShardingType::DATA_PARALLEL) {
          table = std::make_shared<EmbeddingTable>(t.config.name, full);
        } else {
          table = std::make_shared<EmbeddingTable>(
              t.config.name, cut(full, m), shape.rows, shape.dim,
              TableShard{m.row_offset(), m.rows(), m.col_offset(), m.cols()});
          if (fused_ && t.sharding.compute_kernel != EmbeddingComputeKernel::DENSE)
            table->set_fused_optimizer(*fused_);
        }
        table->set_bounds_check_mode(options_.bounds_check_mode);
        t.tables.push_back(table);
      }
    }
    for (const auto& f : t.config.feature_names) {
      features_.push_back(f);
      feature_table_.push_back(static_cast<int>(i));
      feature_dims_.push_back(t.config.embedding_dim);
    }
    tables_.push_back(std::move(t));
  }
}

namespace {

// What is wrong with the caller's per-sample weights Variable: 0 nothing, 5 given to an
// unweighted collection, 6 not one per value of the KJT's weights' dtype.
int64_t weights_problem(const KeyedJaggedTensor& kjt, bool weighted, const Variable& weights) {
  if (!weights.defined()) return 0;
  if (!weighted) return 5;
  if (kjt.has_weights() && (weights.value().numel() != kjt.values().numel() ||
                            weights.value().dtype() != kjt.weights().dtype()))
    return 6;
  return 0;
}

}  // namespace

void ShardedTables::check_input(const KeyedJaggedTensor& kjt, bool weighted, const char* where,
                                const Variable& weights, bool allow_vbe) const {
  if (!options_.check_inputs) {
    // The caller's weights Variable: local facts, raised on this rank alone when the collective
    // check is off (the verdict raises them on every rank otherwise).
    const int64_t weights_status = weights_problem(kjt, weighted, weights);
    FERRY_CHECK(weights_status == 0, InvalidArgument, where, " on rank ", world_.rank(),
                weights_status == 5
                    ? ": per_sample_weights given to an unweighted collection"
                    : ": per_sample_weights must have the KJT's weights' dtype and one element "
                      "per value (" +
                          std::to_string(kjt.values().numel()) + "), got " +
                          std::to_string(weights.value().numel()));
    return;
  }
  const InputCheckStatus mine = input_status(kjt, weighted, weights, allow_vbe, where);
  std::vector<int64_t> all = mine.words;
  if (world_.size() > 1) {
    Tensor out = zeros({static_cast<int64_t>(world_.size()) * InputCheckStatus::kWords},
                       DType::Int64);
    all_gather(from_vector(mine.words), out, world_).wait();
    all = out.to_vector<int64_t>();
  }
  raise_input_status(all, mine, where);
}

InputCheckStatus ShardedTables::input_status(const KeyedJaggedTensor& kjt, bool weighted,
                                             const Variable& weights, bool allow_vbe,
                                             const char* where) const {
  const int64_t weights_status = weights_problem(kjt, weighted, weights);
  const int64_t grad_flag = weights.defined() && weights.requires_grad() ? 1 : 0;
  // {code, feature, sample, id, weights require grad}; code 0 ok, 1 missing feature,
  // 2 id out of range, 3 weights missing, 4 variable stride per key (a sequence collection),
  // 5/6 as weights_status, 7 VBE without valid inverse indices.
  std::vector<int64_t> status{0, 0, 0, 0, grad_flag};
  std::string vbe_error;  // this rank's own inverse-indices problem, in full
  if (kjt.variable_stride_per_key()) {
    if (!allow_vbe) {
      status = {4, 0, 0, 0, grad_flag};
    } else {
      try {
        detail::inverse_rows(kjt, features_, where, world_.rank());
      } catch (const InvalidArgument& e) {
        vbe_error = e.what();
        status = {7, 0, 0, 0, grad_flag};
      }
    }
  }
  if (status[0] == 0 && weighted && !kjt.has_weights()) status = {3, 0, 0, 0, grad_flag};
  if (status[0] == 0 && weights_status != 0)
    status = {weights_status, 0, weights.value().numel(), kjt.values().numel(), grad_flag};
  // Each feature's ids straight from the KJT's values (no per-feature views: this runs on every
  // batch). The keys are usually the features in order; otherwise they are looked up by name.
  const std::vector<std::string>& keys = kjt.keys();
  const bool same_order = keys.size() >= features_.size() &&
                          std::equal(features_.begin(), features_.end(), keys.begin());
  std::map<std::string, int64_t> index;
  if (!same_order) index = kjt.index_per_key();
  const std::vector<int64_t>& key_offsets = kjt.offset_per_key();
  const int64_t* all_ids = kjt.values().data<int64_t>();
  for (size_t f = 0; f < features_.size() && status[0] == 0; ++f) {
    int64_t key = static_cast<int64_t>(f);
    if (!same_order) {
      auto it = index.find(features_[f]);
      if (it == index.end()) {
        status = {1, static_cast<int64_t>(f), 0, 0, grad_flag};
        break;
      }
      key = it->second;
    }
    const int64_t rows = tables_[static_cast<size_t>(feature_table_[f])].config.num_embeddings;
    const auto k = static_cast<size_t>(key);
    const int64_t* ids = all_ids + key_offsets[k];
    const int64_t n = key_offsets[k + 1] - key_offsets[k];
    // One pass over the ids; the sample of a bad one is looked up only when there is one.
    int64_t bad = 0;
    while (bad < n && ids[bad] >= 0 && ids[bad] < rows) ++bad;
    if (bad < n) {
      const Tensor lengths = kjt[features_[f]].lengths();
      int64_t b = 0, end = lengths.numel() > 0 ? static_cast<int64_t>(lengths.get_flat(0)) : 0;
      while (bad >= end && b + 1 < lengths.numel())
        end += static_cast<int64_t>(lengths.get_flat(++b));
      status = {2, static_cast<int64_t>(f), b, ids[bad], grad_flag};
    }
  }
  return {status, vbe_error};
}

void ShardedTables::raise_input_status(const std::vector<int64_t>& all,
                                       const InputCheckStatus& mine, const char* where) const {
  constexpr int kWords = InputCheckStatus::kWords;
  FERRY_CHECK(all.size() % kWords == 0, InvalidArgument, where, ": the input check's words "
              "must be ", kWords, " per rank, got ", all.size());
  const std::string& vbe_error = mine.vbe_error;
  for (int r = 0; r < static_cast<int>(all.size() / kWords); ++r) {
    const int64_t* s = &all[static_cast<size_t>(r) * kWords];
    if (s[0] == 0) continue;
    if (s[0] == 7) {
      FERRY_CHECK(r != world_.rank(), InvalidArgument, vbe_error);
      FERRY_THROW(InvalidArgument, where, ": rank ", r,
                  "'s input: its VBE inverse_indices are missing or invalid (rank ", r,
                  " raises the details)");
    }
    std::ostringstream os;
    os << where << ": rank " << r << "'s input: ";
    const std::string& feature = features_[static_cast<size_t>(std::max<int64_t>(s[1], 0))];
    const auto& cfg = tables_[static_cast<size_t>(feature_table_[static_cast<size_t>(
                                  std::max<int64_t>(s[1], 0))])].config;
    if (s[0] == 1) {
      os << "feature \"" << feature << "\" (table \"" << cfg.name
         << "\") is configured but missing from the KJT's keys";
    } else if (s[0] == 2) {
      os << "table \"" << cfg.name << "\", feature \"" << feature << "\", sample " << s[2]
         << ": id " << s[3] << " is out of range [0, " << cfg.num_embeddings << ")";
    } else if (s[0] == 3) {
      os << "the collection is weighted but the KJT has no weights";
    } else if (s[0] == 5) {
      os << "per_sample_weights given to an unweighted collection";
    } else if (s[0] == 6) {
      os << "per_sample_weights must have the KJT's weights' dtype and one element per value ("
         << s[3] << "), got " << s[2] << " elements";
    } else {
      // VBE goes through every pooled sharding type and through no sequence sharding (as in
      // torchrec): say so, with the sharding types the batch would have gone through.
      std::string types;
      for (const auto& t : tables_) {
        const std::string name(to_string(t.sharding.sharding_type));
        if (types.find(name) == std::string::npos) types += (types.empty() ? "" : ", ") + name;
      }
      os << "a variable stride per key (VBE, stride_per_key_per_rank) is not supported by a "
            "sharded EmbeddingCollection (torchrec raises too); sharding types of this "
            "collection: "
         << types;
    }
    FERRY_THROW(InvalidArgument, os.str());
  }
  // The weights' gradient goes back through a collective: every rank or none.
  std::string with, without;
  for (int r = 0; r < static_cast<int>(all.size() / kWords); ++r)
    (all[static_cast<size_t>(r) * kWords + 4] ? with : without) += " " + std::to_string(r);
  FERRY_CHECK(with.empty() || without.empty(), InvalidArgument, where,
              ": the ranks disagree on whether the per-sample weights require grad (they do on "
              "rank(s)", with, ", not on rank(s)", without,
              "); their gradient goes back through the input dist, a collective");
}

std::map<std::string, Tensor> ShardedTables::state_dict() const {
  std::map<std::string, Tensor> out;
  for (const auto& t : tables_) {
    const std::string key = prefix_ + "." + t.config.name + ".weight";
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
    if (world_.size() > 1) all_reduce(full, world_).wait();
    out[key] = full;
  }
  return out;
}

std::map<std::string, std::vector<LocalShard>> ShardedTables::local_state_dict() const {
  std::map<std::string, std::vector<LocalShard>> out;
  for (const auto& t : tables_) {
    auto& v = out[prefix_ + "." + t.config.name + ".weight"];
    for (size_t s = 0; s < t.shards.size(); ++s)
      v.push_back({t.shards[s], t.tables[s]->weight().value()});
  }
  return out;
}

void ShardedTables::load_state_dict(const std::map<std::string, Tensor>& state) {
  const std::string w = where_ + "::load_state_dict";
  for (const auto& t : tables_) {
    const std::string key = prefix_ + "." + t.config.name + ".weight";
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
      dst.copy_(cut(full, t.shards[s]).to(dst.dtype()));
    }
  }
}

std::vector<std::shared_ptr<EmbeddingTable>> ShardedTables::data_parallel_tables() const {
  std::vector<std::shared_ptr<EmbeddingTable>> out;
  for (const auto& t : tables_)
    if (t.sharding.sharding_type == ShardingType::DATA_PARALLEL) out.push_back(t.tables.front());
  return out;
}

void ShardedTables::step_data_parallel() {
  FERRY_CHECK(fused_.has_value(), InvalidArgument, where_,
              "::step_data_parallel: the collection has no optimizer config");
  reduce_data_parallel_gradients();
  for (const auto& table : data_parallel_tables()) {
    auto it = dp_optimizers_.find(table->name());
    if (it == dp_optimizers_.end())
      it = dp_optimizers_
               .emplace(table->name(), SparseOptimizer(*fused_, table->total_rows(),
                                                       table->total_cols(), table->dtype()))
               .first;
    table->step(it->second);
  }
}

}  // namespace ferry::torchrec::detail
