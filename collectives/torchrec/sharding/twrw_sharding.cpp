#include <ferry/collectives/torchrec/sharding/twrw_sharding.h>

#include <ferry/autograd/ops.h>
#include <ferry/collectives/torchrec/modules/embedding_lookup.h>
#include <ferry/collectives/torchrec/sparse/bucketize.h>

#include <algorithm>
#include <optional>

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
      intra_rs_(intra_, tables.codecs()),
      vbe_intra_rs_(intra_, tables.codecs()) {
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
  std::vector<std::vector<int64_t>> dims_per_node_per_feature(static_cast<size_t>(G_));
  for (int h = 0; h < G_; ++h)
    for (size_t i = 0; i < all.size(); ++i)
      if (node_of[i] == h) {
        features_.push_back(all[i]);
        node_.push_back(h);
        dims_per_node[static_cast<size_t>(h)] += all[i].dim;
        dims_per_node_per_feature[static_cast<size_t>(h)].push_back(all[i].dim);
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
          my_dims_.push_back(dims_[static_cast<size_t>(t)]);
        }
      }
  }
  input_a2a_ = std::make_shared<KJTAllToAll>(world_, splits, G_);
  cross_a2a_ = std::make_shared<PooledEmbeddingsAllToAll>(
      cross_, dims_per_node, std::vector<EmbeddingsCallback>{}, tables.codecs());
  vbe_cross_a2a_ = std::make_shared<VariableBatchPooledEmbeddingsAllToAll>(
      cross_, dims_per_node_per_feature, std::vector<EmbeddingsCallback>{}, tables.codecs());
}

DistFeaturesAwaitable TwRwPooledEmbeddingSharding::input_dist(
    const KeyedJaggedTensor& kjt, const std::shared_ptr<PooledShardingContext>& ctx) const {
  ctx->batch_size = kjt.stride();
  // VBE divides after its output dist, from the caller's KJT (vbe_output_dist).
  if (!kjt.variable_stride_per_key())
    context_as<RwPooledShardingContext>(*ctx, "TwRwPooledEmbeddingSharding::input_dist")
        .mean_divisor = detail::mean_divisor(detail::select_features(kjt, keys_), keys_, dims_,
                                             pooling_, dtype_);
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
    const KeyedJaggedTensor& dist, const std::shared_ptr<PooledShardingContext>& ctx) const {
  std::vector<FeatureLookup> lookups;
  for (size_t i = 0; i < my_keys_.size(); ++i)
    lookups.push_back({.table = features_[static_cast<size_t>(my_feature_pos_[i])].table,
                       .feature = my_keys_[i],
                       .key_index = static_cast<int64_t>(i),
                       .pooling = PoolingType::Sum});
  if (ctx->vbe_input) return vbe_output_dist(lookups, dist, ctx);
  const std::vector<int64_t>& sp = ctx->stride_per_rank;  // every rank's batch, rank order
  const Variable weights = detail::lookup_weights(dist, weighted_, world_, *ctx);
  Variable partial = lookups.empty()
                         ? detail::empty_local(zeros({detail::sum_of(sp), 0}, dtype_))
                         : pooled_embedding_lookup(lookups, dist, weights);
  // Block j of the partial sums holds the samples of local rank j's cross group (ranks j,
  // L + j, ...), node by node. With equal batches every block has G*B rows; otherwise (torchrec's
  // variable-batch path) the blocks are the cross groups' batch sums, reduce-scattered with
  // those splits, and the cross-node all-to-all takes my cross group's batch sizes.
  const bool uneven = std::any_of(sp.begin(), sp.end(), [&](int64_t s) { return s != sp.front(); });
  std::optional<std::vector<int64_t>> intra_splits, cross_batches;
  if (uneven) {
    const int j_me = world_.rank() % L_;
    intra_splits.emplace(static_cast<size_t>(L_), 0);
    cross_batches.emplace();
    for (int h = 0; h < G_; ++h)
      for (int j = 0; j < L_; ++j) {
        const int64_t b = sp[static_cast<size_t>(h * L_ + j)];
        (*intra_splits)[static_cast<size_t>(j)] += b;
        if (j == j_me) cross_batches->push_back(b);
      }
  }
  Awaitable<Variable> intra = intra_rs_.forward(partial, intra_splits);
  const std::shared_ptr<PooledEmbeddingsAllToAll> cross = cross_a2a_;
  const Tensor divisor =
      context_as<RwPooledShardingContext>(*ctx,
                                          "TwRwPooledEmbeddingSharding::compute_and_output_dist")
          .mean_divisor;
  return Awaitable<Variable>([intra, cross, divisor, cross_batches]() mutable {
    Variable y = cross->forward(intra.wait(), cross_batches).wait();
    if (divisor.defined()) y = div(y, Variable(divisor));  // MEAN: full bag length, owner rank
    return y;
  });
}

Awaitable<Variable> TwRwPooledEmbeddingSharding::vbe_output_dist(
    const std::vector<FeatureLookup>& lookups, const KeyedJaggedTensor& dist,
    const std::shared_ptr<PooledShardingContext>& ctx) const {
  // The partial sums laid out by source in the received order (local rank major, node minor),
  // each source's features over its batch of them: block j of L (the sources j*G .. j*G + G-1)
  // is what local rank j's cross group needs, the same layout on every rank of the node.
  const Variable weights = detail::lookup_weights(dist, weighted_, world_, *ctx);
  std::vector<std::vector<int64_t>> batch_per_source;  // [source, received order][my feature]
  Variable send = detail::empty_local(zeros({0}, dtype_));
  if (!lookups.empty()) {
    const Variable padded =
        pooled_embedding_lookup(lookups, detail::pad_variable_stride(dist), weights);
    send = detail::flat_select(padded, detail::vbe_destination_index(dist, my_dims_,
                                                                     world_.size(),
                                                                     batch_per_source));
  } else {
    batch_per_source.assign(static_cast<size_t>(world_.size()), {});
  }
  // Within the node, local rank j gets block j summed: per feature the batches of its cross
  // group together. Across nodes, node h gets the rows of its rank with my local rank.
  const size_t T = my_dims_.size();
  const int j_me = world_.rank() % L_;
  std::vector<std::vector<int64_t>> intra_batches(static_cast<size_t>(L_),
                                                  std::vector<int64_t>(T, 0));
  std::vector<std::vector<int64_t>> cross_batches;
  for (int j = 0; j < L_; ++j)
    for (int h = 0; h < G_; ++h) {
      const std::vector<int64_t>& b = batch_per_source[static_cast<size_t>(j * G_ + h)];
      for (size_t t = 0; t < T; ++t) intra_batches[static_cast<size_t>(j)][t] += b[t];
      if (j == j_me) cross_batches.push_back(b);
    }
  Awaitable<Variable> intra = vbe_intra_rs_.forward(send, intra_batches, my_dims_);
  // Back from every node: its features (features_ is node-major) over my batch of each.
  std::vector<int64_t> pre_a2a;
  for (const detail::RowWiseFeature& f : features_) pre_a2a.push_back(detail::vbe_batch(*ctx, f.key));
  const Tensor divisor = detail::vbe_row_wise_blocks(features_, *ctx, dtype_);
  const std::shared_ptr<VariableBatchPooledEmbeddingsAllToAll> cross = vbe_cross_a2a_;
  return Awaitable<Variable>([intra, cross, cross_batches, pre_a2a, divisor]() mutable {
    Variable y = cross->forward(intra.wait(), cross_batches, pre_a2a).wait();
    if (divisor.defined()) y = div(y, Variable(divisor));  // MEAN: full bag length, owner rank
    return y;
  });
}

}  // namespace ferry::torchrec
