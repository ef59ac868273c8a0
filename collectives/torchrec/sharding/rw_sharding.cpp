#include <ferry/collectives/torchrec/sharding/rw_sharding.h>

#include <ferry/autograd/ops.h>
#include <ferry/collectives/torchrec/modules/embedding_lookup.h>
#include <ferry/collectives/torchrec/sparse/bucketize.h>

#include <algorithm>

namespace ferry::torchrec {

namespace detail {

std::vector<RowWiseFeature> row_wise_features(const ShardedTables& tables,
                                              const std::vector<int>& table_ids, int num_blocks) {
  std::vector<RowWiseFeature> out;
  int first_feature = 0;
  for (const ShardedTable& t : tables.tables()) {
    const int nf = static_cast<int>(t.config.feature_names.size());
    if (std::find(table_ids.begin(), table_ids.end(), t.index) != table_ids.end()) {
      const int64_t bs = (t.config.num_embeddings + num_blocks - 1) / num_blocks;
      for (int f = 0; f < nf; ++f)
        out.push_back({first_feature + f, t.config.feature_names[static_cast<size_t>(f)],
                       t.config.embedding_dim, bs, t.config.pooling,
                       t.tables.empty() ? nullptr : t.tables.front()});
    }
    first_feature += nf;
  }
  return out;
}

Tensor vbe_row_wise_blocks(const std::vector<RowWiseFeature>& features, PooledShardingContext& ctx,
                           DType dtype) {
  ctx.vbe_blocks.clear();
  std::vector<double> divisor;
  bool mean = false;
  int64_t start = 0;
  for (const RowWiseFeature& f : features) {
    const int64_t B = vbe_batch(ctx, f.key);
    ctx.vbe_blocks.push_back({f.feature, 0, f.dim, start, f.dim});
    start += B * f.dim;
    const Tensor lengths = (*ctx.vbe_input)[f.key].lengths();
    for (int64_t b = 0; b < B; ++b) {
      const double n = f.pooling == PoolingType::Mean ? lengths.get_flat(b) : 1.0;
      divisor.insert(divisor.end(), static_cast<size_t>(f.dim), n > 0 ? n : 1.0);
    }
    mean = mean || f.pooling == PoolingType::Mean;
  }
  return mean ? from_vector(divisor).to(dtype) : Tensor();
}

}  // namespace detail

namespace {
template <class F>
std::vector<int64_t> collect(const std::vector<detail::RowWiseFeature>& fs, F f) {
  std::vector<int64_t> out;
  for (const auto& x : fs) out.push_back(f(x));
  return out;
}
std::vector<std::string> keys_of(const std::vector<detail::RowWiseFeature>& fs) {
  std::vector<std::string> out;
  for (const auto& x : fs) out.push_back(x.key);
  return out;
}
}  // namespace

RwPooledEmbeddingSharding::RwPooledEmbeddingSharding(const detail::ShardedTables& tables,
                                                     std::vector<int> table_ids, bool is_weighted)
    : world_(tables.world()),
      weighted_(is_weighted),
      dtype_(tables.tables()[static_cast<size_t>(table_ids.at(0))].config.data_type),
      features_(detail::row_wise_features(tables, table_ids, world_.size())),
      keys_(keys_of(features_)),
      dims_(collect(features_, [](const auto& x) { return x.dim; })),
      block_sizes_(collect(features_, [](const auto& x) { return x.block_size; })),
      input_a2a_(world_, std::vector<int64_t>(static_cast<size_t>(world_.size()),
                                              static_cast<int64_t>(features_.size()))),
      output_rs_(world_, tables.codecs()),
      vbe_rs_(world_, tables.codecs()) {
  for (const auto& f : features_) {
    blocks_.push_back({f.feature, 0, f.dim});
    pooling_.push_back(f.pooling);
  }
}

DistFeaturesAwaitable RwPooledEmbeddingSharding::input_dist(
    const KeyedJaggedTensor& kjt, const std::shared_ptr<PooledShardingContext>& ctx) const {
  ctx->batch_size = kjt.stride();
  // VBE divides after its reduce-scatter from the caller's KJT (vbe_output_dist).
  if (!kjt.variable_stride_per_key())
    context_as<RwPooledShardingContext>(*ctx, "RwPooledEmbeddingSharding::input_dist")
        .mean_divisor = detail::mean_divisor(detail::select_features(kjt, keys_), keys_, dims_,
                                             pooling_, dtype_);
  const auto send = [this](const KeyedJaggedTensor& k) {
    return bucketize_kjt_before_all2all(detail::select_features(k, keys_), world_.size(),
                                        block_sizes_, false, false, std::nullopt,
                                        /*keep_original_indices=*/true)
        .kjt;
  };
  detail::route_weights(kjt, send, *ctx);
  return detail::launch_input_dist(input_a2a_, send(kjt), ctx);
}

Awaitable<Variable> RwPooledEmbeddingSharding::compute_and_output_dist(
    const KeyedJaggedTensor& dist, const std::shared_ptr<PooledShardingContext>& ctx) const {
  std::vector<FeatureLookup> lookups;
  for (size_t t = 0; t < features_.size(); ++t)
    lookups.push_back({.table = features_[t].table,
                       .feature = features_[t].key,
                       .key_index = static_cast<int64_t>(t),
                       .pooling = PoolingType::Sum});  // partial sums; MEAN divides below
  if (ctx->vbe_input) return vbe_output_dist(lookups, dist, ctx);
  Variable partial =
      pooled_embedding_lookup(lookups, dist, detail::lookup_weights(dist, weighted_, world_, *ctx));
  Awaitable<Variable> out = output_rs_.forward(partial, ctx->stride_per_rank);
  const Tensor& mean_divisor =
      context_as<RwPooledShardingContext>(*ctx,
                                          "RwPooledEmbeddingSharding::compute_and_output_dist")
          .mean_divisor;
  if (mean_divisor.defined()) {
    // MEAN: the full bag's sum divided by the full bag length, here on the owning rank.
    const Variable divisor(mean_divisor);
    out.then([divisor](Variable y) { return div(y, divisor); });
  }
  return out;
}

Awaitable<Variable> RwPooledEmbeddingSharding::vbe_output_dist(
    const std::vector<FeatureLookup>& lookups, const KeyedJaggedTensor& dist,
    const std::shared_ptr<PooledShardingContext>& ctx) const {
  // Every rank holds a row block of every feature: partial sums for every source's samples,
  // laid out destination-major, reduce-scattered per feature with each rank's batches.
  const Variable weights = detail::lookup_weights(dist, weighted_, world_, *ctx);
  const Variable padded =
      pooled_embedding_lookup(lookups, detail::pad_variable_stride(dist), weights);
  std::vector<std::vector<int64_t>> batch_per_rank;
  const Variable send = detail::flat_select(
      padded, detail::vbe_destination_index(dist, dims_, world_.size(), batch_per_rank));
  Awaitable<Variable> out = vbe_rs_.forward(send, batch_per_rank, dims_);
  const Tensor divisor = detail::vbe_row_wise_blocks(features_, *ctx, dtype_);
  if (divisor.defined()) {
    const Variable d(divisor);
    out.then([d](Variable y) { return div(y, d); });
  }
  return out;
}

RwSequenceEmbeddingSharding::RwSequenceEmbeddingSharding(const detail::ShardedTables& tables,
                                                         std::vector<int> table_ids)
    : world_(tables.world()),
      features_(detail::row_wise_features(tables, table_ids, world_.size())),
      keys_(keys_of(features_)),
      block_sizes_(collect(features_, [](const auto& x) { return x.block_size; })),
      input_a2a_(world_, std::vector<int64_t>(static_cast<size_t>(world_.size()),
                                              static_cast<int64_t>(features_.size()))),
      output_a2a_(world_, std::vector<int64_t>(static_cast<size_t>(world_.size()),
                                               static_cast<int64_t>(features_.size())),
                  tables.codecs()) {
  for (const auto& f : features_) blocks_.push_back({f.feature, 0, f.dim});
}

DistFeaturesAwaitable RwSequenceEmbeddingSharding::input_dist(
    const KeyedJaggedTensor& kjt, const std::shared_ptr<SequenceShardingContext>& ctx) const {
  ctx->batch_size = kjt.stride();
  const KeyedJaggedTensor mine = detail::select_features(kjt, keys_);
  ctx->sent_length_per_key = mine.length_per_key();
  BucketizedKjt b = bucketize_kjt_before_all2all(mine, world_.size(), block_sizes_,
                                                 /*output_permute=*/true, false, std::nullopt,
                                                 /*keep_original_indices=*/true);
  ctx->unbucketize_permute = b.unbucketize_permute;
  return detail::launch_input_dist(input_a2a_, b.kjt, ctx);
}

Awaitable<std::vector<Variable>> RwSequenceEmbeddingSharding::compute_and_output_dist(
    const KeyedJaggedTensor& dist, const std::shared_ptr<SequenceShardingContext>& ctx) const {
  std::vector<FeatureLookup> lookups;
  for (size_t t = 0; t < features_.size(); ++t)
    lookups.push_back({.table = features_[t].table,
                       .feature = features_[t].key,
                       .key_index = static_cast<int64_t>(t)});
  Variable local = cat(sequence_embedding_lookup(lookups, dist), 0);
  return detail::sequence_output_dist(output_a2a_, local, dist, *ctx);
}

}  // namespace ferry::torchrec
