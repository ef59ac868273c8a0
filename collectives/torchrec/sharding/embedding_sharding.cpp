#include <ferry/collectives/torchrec/sharding/embedding_sharding.h>

#include <ferry/autograd/ops.h>
#include <ferry/collectives/torchrec/comm/comm_switches.h>
#include <ferry/collectives/torchrec/sharding/weights_dist.h>

#include <ferry/runtime/error.h>

#include <algorithm>

namespace ferry::torchrec::detail {

DistFeaturesAwaitable launch_input_dist(const KJTAllToAll& a2a, const KeyedJaggedTensor& send,
                                        const std::shared_ptr<EmbeddingShardingContext>& ctx) {
  KJTAllToAllSplitsAwaitable phase1 = a2a(send);
  const int W = a2a.group().size();
  return DistFeaturesAwaitable([phase1, ctx, W]() mutable {
    KJTAllToAllTensorsAwaitable phase2 = phase1.wait();
    ctx->dist = phase2;
    ctx->stride_per_rank = phase2.stride_per_rank();
    if (ctx->stride_per_rank.empty()) ctx->stride_per_rank.assign(static_cast<size_t>(W), ctx->batch_size);
    return Awaitable<KeyedJaggedTensor>(phase2);
  });
}

Variable lookup_weights(const KeyedJaggedTensor& kjt, bool weighted, const Group& group,
                        const PooledShardingContext& ctx) {
  if (!weighted) return Variable();
  if (!ctx.weights.defined()) return Variable(kjt.weights());
  FERRY_CHECK(ctx.dist.has_value(), InvalidArgument,
              "ShardedEmbeddingBagCollection: per-sample weights that require grad need the "
              "input dist's exchange (rank ", group.rank(), ")");
  return comm_op_gradient_scaling(dist_weights(ctx.weights, ctx.send_index, *ctx.dist, kjt, group),
                                  group);
}

void route_weights(const KeyedJaggedTensor& kjt,
                   const std::function<KeyedJaggedTensor(const KeyedJaggedTensor&)>& rearrange,
                   PooledShardingContext& ctx) {
  if (!ctx.weights.defined()) return;
  ctx.send_index = value_sources(kjt, rearrange);
}

Awaitable<std::vector<Variable>> sequence_output_dist(const SequenceEmbeddingsAllToAll& a2a,
                                                      const Variable& local,
                                                      const KeyedJaggedTensor& dist,
                                                      const SequenceShardingContext& ctx) {
  const auto& sp = ctx.stride_per_rank;
  const bool uneven = std::any_of(sp.begin(), sp.end(), [&](int64_t s) { return s != sp.front(); });
  Awaitable<Variable> back = a2a.forward(
      local, dist.lengths(), ctx.dist->input_splits("values"), ctx.dist->output_splits("values"),
      ctx.unbucketize_permute, uneven ? std::optional<std::vector<int64_t>>(sp) : std::nullopt,
      uneven ? std::optional<Tensor>(sequence_sparse_features_recat(*ctx.dist)) : std::nullopt);
  const std::vector<int64_t> sizes = ctx.sent_length_per_key;
  return Awaitable<std::vector<Variable>>([back, sizes]() mutable {
    return split(back.wait(), sizes, 0);
  });
}

KeyedJaggedTensor select_features(const KeyedJaggedTensor& kjt,
                                  const std::vector<std::string>& features,
                                  const std::vector<std::string>& names) {
  // Usually the KJT holds exactly these features in this order (one sharding group, keys in
  // config order): no key index to build and no permuted copy. (With a repeated key, key_index
  // raises its ambiguity error as before.)
  const bool as_is = kjt.keys_unique() && kjt.keys() == features;
  thread_local std::vector<int64_t> idx;  // scratch, refilled by every call
  idx.clear();
  if (!as_is) {
    idx.reserve(features.size());
    const std::vector<std::string>& keys = kjt.keys();
    // A batch's KJT is new every step: for the usual few dozen unique keys a scan finds each
    // feature without building the KJT's key map (a hash map, one node per key, every step).
    constexpr size_t kScanned = 64;
    for (const auto& f : features) {
      int64_t k = -1;
      if (kjt.keys_unique() && keys.size() <= kScanned) {
        const auto it = std::find(keys.begin(), keys.end(), f);
        if (it != keys.end()) k = it - keys.begin();
      }
      idx.push_back(k >= 0 ? k : kjt.key_index(f));  // key_index raises for a missing key
    }
  }
  const KeyedJaggedTensor p = as_is ? kjt : kjt.permute(idx);
  if (names.empty()) return p;
  if (p.variable_stride_per_key())  // VBE: every key keeps its own batch
    return KeyedJaggedTensor::from_lengths_sync(names, p.values(), p.lengths(),
                                                p.weights_or_none(), std::nullopt,
                                                p.stride_per_key_per_rank());
  return KeyedJaggedTensor::from_lengths_sync(names, p.values(), p.lengths(), p.weights_or_none(),
                                              p.stride());
}

Variable empty_local(const Tensor& zeros) { return Variable(zeros, /*requires_grad=*/true); }

Tensor mean_divisor(const KeyedJaggedTensor& kjt, const std::vector<std::string>& features,
                    const std::vector<int64_t>& dims, const std::vector<PoolingType>& pooling,
                    DType dtype) {
  bool any = false;
  for (PoolingType p : pooling) any = any || p == PoolingType::Mean;
  if (!any) return Tensor();
  const int64_t B = kjt.stride();
  const int64_t cols = sum_of(dims);
  Tensor out = ones({B, cols}, dtype);
  int64_t c0 = 0;
  for (size_t f = 0; f < features.size(); ++f) {
    if (pooling[f] == PoolingType::Mean) {
      const Tensor lengths = kjt[features[f]].lengths();
      for (int64_t b = 0; b < B; ++b) {
        const double n = lengths.get_flat(b);
        if (n > 0)
          for (int64_t c = 0; c < dims[f]; ++c) out.set_flat(b * cols + c0 + c, n);
      }
    }
    c0 += dims[f];
  }
  return out;
}

// Tables by sharding group: data_parallel, table/column-wise, row_wise, table_row_wise.
std::vector<std::vector<int>> tables_by_group(const ShardedTables& tables) {
  std::vector<std::vector<int>> g(4);
  for (const auto& t : tables.tables()) {
    switch (t.sharding.sharding_type) {
      case ShardingType::DATA_PARALLEL: g[0].push_back(t.index); break;
      case ShardingType::TABLE_WISE:
      case ShardingType::COLUMN_WISE:
      case ShardingType::TABLE_COLUMN_WISE: g[1].push_back(t.index); break;
      case ShardingType::ROW_WISE: g[2].push_back(t.index); break;
      case ShardingType::TABLE_ROW_WISE: g[3].push_back(t.index); break;
    }
  }
  return g;
}

// The pieces of every group's output (split by block), sorted by (feature, column), joined by
// feature.
std::vector<std::pair<OutputBlock, Variable>> sorted_pieces(
    std::vector<std::pair<OutputBlock, Variable>> pieces) {
  std::stable_sort(pieces.begin(), pieces.end(), [](const auto& a, const auto& b) {
    return a.first.feature != b.first.feature ? a.first.feature < b.first.feature
                                              : a.first.col_offset < b.first.col_offset;
  });
  return pieces;
}

int64_t vbe_batch(const PooledShardingContext& ctx, const std::string& key) {
  const KeyedJaggedTensor& k = *ctx.vbe_input;
  return k.stride_per_key()[static_cast<size_t>(k.key_index(key))];
}

std::vector<int64_t> vbe_destination_index(const KeyedJaggedTensor& dist,
                                           const std::vector<int64_t>& widths, int W,
                                           std::vector<std::vector<int64_t>>& batch_per_rank) {
  const auto& spkpr = dist.stride_per_key_per_rank();
  const size_t T = widths.size();
  FERRY_CHECK(spkpr.size() == T, InvalidArgument,
              "vbe_destination_index: the received KJT has ", spkpr.size(), " keys, expected ",
              T);
  batch_per_rank.assign(static_cast<size_t>(W), std::vector<int64_t>(T, 0));
  std::vector<int64_t> col(T + 1, 0);
  for (size_t t = 0; t < T; ++t) col[t + 1] = col[t] + widths[t];
  const int64_t C = col[T];
  std::vector<std::vector<int64_t>> first(T, std::vector<int64_t>(static_cast<size_t>(W), 0));
  for (size_t t = 0; t < T; ++t) {
    FERRY_CHECK(static_cast<int>(spkpr[t].size()) == W, InvalidArgument,
                "vbe_destination_index: key ", t, " has batches from ", spkpr[t].size(),
                " ranks, expected ", W);
    for (int s = 0; s < W; ++s) {
      batch_per_rank[static_cast<size_t>(s)][t] = spkpr[t][static_cast<size_t>(s)];
      if (s + 1 < W)
        first[t][static_cast<size_t>(s + 1)] =
            first[t][static_cast<size_t>(s)] + spkpr[t][static_cast<size_t>(s)];
    }
  }
  std::vector<int64_t> index;
  for (int s = 0; s < W; ++s)
    for (size_t t = 0; t < T; ++t)
      for (int64_t b = 0; b < spkpr[t][static_cast<size_t>(s)]; ++b)
        for (int64_t d = 0; d < widths[t]; ++d)
          index.push_back((first[t][static_cast<size_t>(s)] + b) * C + col[t] + d);
  return index;
}

Awaitable<Awaitable<std::vector<KeyedJaggedTensor>>> join_input_dists(
    std::vector<DistFeaturesAwaitable> phase1) {
  // The lists move into the closures: a copy of each was an allocation per step. One
  // sharding group (the usual case) needs no list of its second phase.
  if (phase1.size() == 1) {
    return Awaitable<Awaitable<std::vector<KeyedJaggedTensor>>>(
        [first = std::move(phase1.front())]() mutable {
          return Awaitable<std::vector<KeyedJaggedTensor>>(
              [second = first.wait()]() mutable {
                std::vector<KeyedJaggedTensor> out;
                out.reserve(1);
                out.push_back(second.wait());
                return out;
              });
        });
  }
  return Awaitable<Awaitable<std::vector<KeyedJaggedTensor>>>(
      [phase1 = std::move(phase1)]() mutable {
        std::vector<Awaitable<KeyedJaggedTensor>> phase2;
        phase2.reserve(phase1.size());
        for (auto& a : phase1) phase2.push_back(a.wait());
        return Awaitable<std::vector<KeyedJaggedTensor>>(
            [phase2 = std::move(phase2)]() mutable {
              std::vector<KeyedJaggedTensor> out;
              out.reserve(phase2.size());
              for (auto& a : phase2) out.push_back(a.wait());
              return out;
            });
      });
}

}  // namespace ferry::torchrec::detail
