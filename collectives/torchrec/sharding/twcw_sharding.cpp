#include <ferry/collectives/torchrec/sharding/twcw_sharding.h>

#include <ferry/autograd/ops.h>
#include <ferry/collectives/torchrec/modules/embedding_lookup.h>

#include <algorithm>

namespace ferry::torchrec {

TwCwPooledEmbeddingSharding::TwCwPooledEmbeddingSharding(const detail::ShardedTables& tables,
                                                         std::vector<int> table_ids,
                                                         bool is_weighted)
    : world_(tables.world()),
      weighted_(is_weighted),
      dtype_(detail::tables_dtype(tables, table_ids)),
      units_(detail::shard_units(tables, table_ids, 0)),
      send_keys_(detail::unit_keys(units_)),
      send_names_(detail::unit_names(units_)),
      dims_per_rank_(detail::dims_per_rank(units_, world_.size())),
      lookups_(detail::unit_lookups(units_, world_.rank(), /*pooled=*/true)),
      input_a2a_(world_, detail::units_per_rank(units_, world_.size())),
      output_a2a_(world_, dims_per_rank_, {}, tables.codecs()),
      vbe_a2a_(world_, detail::unit_widths_per_rank(units_, world_.size()), {}, tables.codecs()) {
  std::vector<detail::ShardUnit> sorted = units_;
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return a.feature != b.feature ? a.feature < b.feature : a.col_offset < b.col_offset;
  });
  for (const auto& u : sorted) blocks_.push_back({u.feature, u.col_offset, u.width});
  // The units arrive in rank order; each one is written straight to its (feature, column)
  // place as it arrives.
  if (!units_.empty()) output_a2a_.permute_in_exchange(detail::column_order(units_));
}

DistFeaturesAwaitable TwCwPooledEmbeddingSharding::input_dist(
    const KeyedJaggedTensor& kjt, const std::shared_ptr<PooledShardingContext>& ctx) const {
  ctx->batch_size = kjt.stride();
  const auto send = [this](const KeyedJaggedTensor& k) {
    return detail::select_features(k, send_keys_, send_names_);
  };
  detail::route_weights(kjt, send, *ctx);
  return detail::launch_input_dist(input_a2a_, send(kjt), ctx);
}

Awaitable<Variable> TwCwPooledEmbeddingSharding::compute_and_output_dist(
    const KeyedJaggedTensor& dist, const std::shared_ptr<PooledShardingContext>& ctx) const {
  const int me = world_.rank();
  const std::vector<FeatureLookup>& lookups = lookups_;
  const Variable weights = detail::lookup_weights(dist, weighted_, world_, *ctx);
  if (ctx->vbe_input) {
    // VBE: the rows of every (destination, unit) in destination-major order; the output's
    // blocks are the units of every owner rank in rank order, each over my batch of its feature.
    std::vector<int64_t> widths;
    for (const auto& u : units_)
      if (u.rank == me) widths.push_back(u.width);
    std::vector<std::vector<int64_t>> batch_per_rank;
    Variable send = detail::empty_local(zeros({0}, dtype_));
    if (!lookups.empty()) {
      const Variable padded =
          pooled_embedding_lookup(lookups, detail::pad_variable_stride(dist), weights);
      send = detail::flat_select(
          padded, detail::vbe_destination_index(dist, widths, world_.size(), batch_per_rank));
    } else {
      batch_per_rank.assign(static_cast<size_t>(world_.size()), {});
    }
    std::vector<int64_t> pre_a2a;
    ctx->vbe_blocks.clear();
    int64_t start = 0;
    for (const auto& u : units_) {
      const int64_t b = detail::vbe_batch(*ctx, u.key);
      pre_a2a.push_back(b);
      ctx->vbe_blocks.push_back({u.feature, u.col_offset, u.width, start, u.width});
      start += b * u.width;
    }
    return vbe_a2a_.forward(send, batch_per_rank, pre_a2a);
  }
  const int64_t n = detail::sum_of(ctx->stride_per_rank);
  Variable local = lookups.empty() ? detail::empty_local(zeros({n, 0}, dtype_))
                                   : pooled_embedding_lookup(lookups, dist, weights);
  return output_a2a_.forward(local, ctx->stride_per_rank);
}

TwCwSequenceEmbeddingSharding::TwCwSequenceEmbeddingSharding(const detail::ShardedTables& tables,
                                                             std::vector<int> table_ids,
                                                             int64_t width)
    : world_(tables.world()),
      dtype_(detail::tables_dtype(tables, table_ids)),
      width_(width),
      units_(detail::shard_units(tables, table_ids, width)),
      send_keys_(detail::unit_keys(units_)),
      send_names_(detail::unit_names(units_)),
      lookups_(detail::unit_lookups(units_, world_.rank(), /*pooled=*/false)),
      input_a2a_(world_, detail::units_per_rank(units_, world_.size())),
      output_a2a_(world_, detail::units_per_rank(units_, world_.size()), tables.codecs()) {
  for (const auto& u : units_) blocks_.push_back({u.feature, u.col_offset, u.width});
}

DistFeaturesAwaitable TwCwSequenceEmbeddingSharding::input_dist(
    const KeyedJaggedTensor& kjt, const std::shared_ptr<SequenceShardingContext>& ctx) const {
  ctx->batch_size = kjt.stride();
  KeyedJaggedTensor send = detail::select_features(kjt, send_keys_, send_names_);
  ctx->sent_length_per_key = send.length_per_key();
  return detail::launch_input_dist(input_a2a_, send, ctx);
}

Awaitable<std::vector<Variable>> TwCwSequenceEmbeddingSharding::compute_and_output_dist(
    const KeyedJaggedTensor& dist, const std::shared_ptr<SequenceShardingContext>& ctx) const {
  const std::vector<FeatureLookup>& lookups = lookups_;
  Variable local = lookups.empty() ? detail::empty_local(zeros({0, width_}, dtype_))
                                   : cat(sequence_embedding_lookup(lookups, dist), 0);
  return detail::sequence_output_dist(output_a2a_, local, dist, *ctx);
}

}  // namespace ferry::torchrec
