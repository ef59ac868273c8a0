#include <ferry/collectives/torchrec/sharding/twrw_sharding.h>

#include <ferry/autograd/ops.h>
#include <ferry/collectives/torchrec/modules/embedding_lookup.h>
#include <ferry/collectives/torchrec/sparse/bucketize.h>
#include <ferry/runtime/error.h>

#include <algorithm>

namespace ferry::torchrec {

TwRwPooledEmbeddingSharding::TwRwPooledEmbeddingSharding(const detail::ShardedTables& tables,
                                                         std::vector<int> table_ids,
                                                         bool is_weighted, Group intra,
                                                         Group cross)
    : world_(tables.world()),
      intra_(std::move(intra)),
      cross_(std::move(cross)),
      L_(tables.local_size()),
      G_(tables.world().size() / tables.local_size()),
      weighted_(is_weighted),
      dtype_(tables.tables()[static_cast<size_t>(table_ids.at(0))].config.data_type),
      intra_rs_(intra_, tables.codecs()) {
  const int W = world_.size(), me = world_.rank();
  // Every table's node, features grouped node-major.
  const std::vector<detail::RowWiseFeature> all =
      detail::row_wise_features(tables, table_ids, L_);
  std::vector<int> node_of;
  for (const auto& f : all) {
    const int t = tables.feature_table()[static_cast<size_t>(f.feature)];
    node_of.push_back(tables.tables()[static_cast<size_t>(t)].sharding.ranks.front() / L_);
  }
  std::vector<int64_t> dims_per_node(static_cast<size_t>(G_), 0);
  for (int h = 0; h < G_; ++h)
    for (size_t i = 0; i < all.size(); ++i)
      if (node_of[i] == h) {
        features_.push_back(all[i]);
        node_.push_back(h);
        dims_per_node[static_cast<size_t>(h)] += all[i].dim;
      }
  const int64_t T = static_cast<int64_t>(features_.size());
  for (const auto& f : features_) {
    keys_.push_back(f.key);
    dims_.push_back(f.dim);
    block_sizes_.push_back(f.block_size);
    pooling_.push_back(f.pooling);
    blocks_.push_back({f.feature, 0, f.dim});
  }
  std::vector<int64_t> splits(static_cast<size_t>(W), 0);
  for (int r = 0; r < W; ++r) {
    const int h = r / L_, j = r % L_;
    for (int64_t t = 0; t < T; ++t)
      if (node_[static_cast<size_t>(t)] == h) {
        send_permute_.push_back(j * T + t);
        ++splits[static_cast<size_t>(r)];
        if (r == me) {
          my_keys_.push_back(keys_[static_cast<size_t>(t)]);
          my_feature_pos_.push_back(t);
        }
      }
  }
  input_a2a_ = std::make_shared<KJTAllToAll>(world_, splits, G_);
  cross_a2a_ = std::make_shared<PooledEmbeddingsAllToAll>(
      cross_, dims_per_node, std::vector<EmbeddingsCallback>{}, tables.codecs());
}

DistFeaturesAwaitable TwRwPooledEmbeddingSharding::input_dist(
    const KeyedJaggedTensor& kjt, const std::shared_ptr<ShardingBatchContext>& ctx) const {
  ctx->batch_size = kjt.stride();
  // This output dist has no variable-batch form (torchrec's table_row_wise has one); the
  // collection's input check refuses VBE before any rank gets here, this guards a disabled check.
  FERRY_CHECK(!kjt.variable_stride_per_key(), InvalidArgument,
              "ShardedEmbeddingBagCollection::input_dist on rank ", world_.rank(),
              ": a variable stride per key (VBE) is not supported by table_row_wise sharding");
  const KeyedJaggedTensor mine = detail::select_features(kjt, keys_);
  ctx->mean_divisor = detail::mean_divisor(mine, keys_, dims_, pooling_, dtype_);
  const auto send = [this](const KeyedJaggedTensor& k) {
    return bucketize_kjt_before_all2all(detail::select_features(k, keys_), L_, block_sizes_,
                                        false, false, std::nullopt,
                                        /*keep_original_indices=*/true)
        .kjt.permute(send_permute_);
  };
  detail::route_weights(kjt, send, *ctx);
  return detail::launch_input_dist(*input_a2a_, send(kjt), ctx);
}

Awaitable<Variable> TwRwPooledEmbeddingSharding::compute_and_output_dist(
    const KeyedJaggedTensor& dist, const std::shared_ptr<ShardingBatchContext>& ctx) const {
  const auto& sp = ctx->stride_per_rank;
  FERRY_CHECK(std::all_of(sp.begin(), sp.end(), [&](int64_t s) { return s == sp.front(); }),
              InvalidArgument,
              "ShardedEmbeddingBagCollection: table_row_wise sharding needs the same batch size "
              "on every rank");
  const int64_t B = sp.front();
  std::vector<FeatureLookup> lookups;
  for (size_t i = 0; i < my_keys_.size(); ++i)
    lookups.push_back({.table = features_[static_cast<size_t>(my_feature_pos_[i])].table,
                       .feature = my_keys_[i],
                       .key_index = static_cast<int64_t>(i),
                       .pooling = PoolingType::Sum});
  const Variable weights = detail::lookup_weights(dist, weighted_, world_, *ctx);
  Variable partial = lookups.empty()
                         ? detail::empty_local(zeros({B * world_.size(), 0}, dtype_))
                         : pooled_embedding_lookup(lookups, dist, weights);
  // Intra-node: L blocks of G*B rows (the samples of ranks j, L + j, ... for local rank j).
  Awaitable<Variable> intra = intra_rs_.forward(partial);
  const std::shared_ptr<PooledEmbeddingsAllToAll> cross = cross_a2a_;
  const Tensor divisor = ctx->mean_divisor;
  return Awaitable<Variable>([intra, cross, divisor]() mutable {
    Variable y = cross->forward(intra.wait()).wait();
    if (divisor.defined()) y = div(y, Variable(divisor));  // MEAN: full bag length, owner rank
    return y;
  });
}

}  // namespace ferry::torchrec
