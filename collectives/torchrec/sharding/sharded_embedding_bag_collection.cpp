#include <ferry/collectives/torchrec/sharding/sharded_embedding_bag_collection.h>

#include <ferry/autograd/function.h>
#include <ferry/autograd/ops.h>
#include <ferry/autograd/ops_detail.h>
#include <ferry/collectives/torchrec/sharding/dp_sharding.h>
#include <ferry/collectives/torchrec/sharding/rw_sharding.h>
#include <ferry/collectives/torchrec/sharding/twcw_sharding.h>
#include <ferry/collectives/torchrec/sharding/twrw_sharding.h>
#include <ferry/collectives/torchrec/utils/topology.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/object_pool.h>
#include <ferry/runtime/small_vector.h>

#include <algorithm>
#include <cstring>

namespace ferry::torchrec {

namespace {

// One block of a sharding group's output and where it goes in the collection's output.
struct BlockMove {
  size_t group;       // which group's output
  int64_t from_col;   // its first column there
  int64_t to_col;     // and in the collection's output
  int64_t width;
};

// How the groups' outputs make the collection's output, fixed by the plan (planned once: a step
// only copies).
struct Assembly {
  // One group whose blocks already come in (feature, column) order (table-wise after its
  // permute, for one): its output is the result, no copy.
  bool as_is = false;
  std::vector<BlockMove> moves;  // else every group's blocks in (feature, column) order
  int64_t width = 0;
};

std::shared_ptr<const Assembly> plan_assembly(
    const std::vector<std::shared_ptr<PooledEmbeddingSharding>>& shardings) {
  auto a = std::make_shared<Assembly>();
  if (shardings.empty()) return a;
  std::vector<std::pair<OutputBlock, BlockMove>> blocks;
  for (size_t i = 0; i < shardings.size(); ++i) {
    int64_t col = 0;
    for (const OutputBlock& b : shardings[i]->output_blocks()) {
      blocks.push_back({b, BlockMove{i, col, 0, b.width}});
      col += b.width;
    }
  }
  auto feature_order = [](const OutputBlock& x, const OutputBlock& y) {
    return x.feature != y.feature ? x.feature < y.feature : x.col_offset < y.col_offset;
  };
  const auto& first = shardings[0]->output_blocks();
  a->as_is = shardings.size() == 1 && std::is_sorted(first.begin(), first.end(), feature_order);
  std::stable_sort(blocks.begin(), blocks.end(),
                   [&](const auto& x, const auto& y) { return feature_order(x.first, y.first); });
  for (auto& [block, move] : blocks) {
    move.to_col = a->width;
    a->width += move.width;
    a->moves.push_back(move);
  }
  return a;
}

}  // namespace

struct ShardedEmbeddingBagCollection::OutputParts {
  std::vector<std::string> keys;
  std::vector<int64_t> dims;
  std::shared_ptr<const Assembly> assembly;
};

ShardedEmbeddingBagCollection::ShardedEmbeddingBagCollection(
    std::vector<EmbeddingBagConfig> tables, bool is_weighted, const ModuleShardingPlan& plan,
    Group world, ShardedEmbeddingOptions options, std::optional<FusedOptimizerConfig> fused,
    uint64_t seed)
    : ShardedCollectionBase(tables, plan, std::move(world), options, fused, seed, is_weighted,
                            /*allow_vbe=*/true, "ShardedEmbeddingBagCollection",
                            "embedding_bags"),
      configs_(std::move(tables)),
      is_weighted_(is_weighted) {
  const detail::ShardedTables& sharded = sharded_tables();
  const auto groups = detail::tables_by_group(sharded);
  if (!groups[0].empty())
    shardings_.push_back(
        std::make_shared<DpPooledEmbeddingSharding>(sharded, groups[0], is_weighted_));
  if (!groups[1].empty())
    shardings_.push_back(
        std::make_shared<TwCwPooledEmbeddingSharding>(sharded, groups[1], is_weighted_));
  if (!groups[2].empty())
    shardings_.push_back(
        std::make_shared<RwPooledEmbeddingSharding>(sharded, groups[2], is_weighted_));
  if (!groups[3].empty()) {
    auto [intra, cross] = intra_and_cross_node_pg(sharded.world(), sharded.local_size());
    shardings_.push_back(std::make_shared<TwRwPooledEmbeddingSharding>(
        sharded, groups[3], is_weighted_, intra, cross));
  }
  output_parts_ = std::make_shared<const OutputParts>(
      OutputParts{sharded.features(), sharded.feature_dims(), plan_assembly(shardings_)});
}

namespace {

// A pooled sharding's context as its own type (it made it in input_dist), sharing ownership.
std::shared_ptr<PooledShardingContext> pooled_context(
    const std::shared_ptr<EmbeddingShardingContext>& c) {
  return {c, &context_as<PooledShardingContext>(
                 *c, "ShardedEmbeddingBagCollection::compute_and_output_dist")};
}

PooledEmbeddings keyed(const std::vector<std::string>& keys, const std::vector<int64_t>& dims,
                       Variable values) {
  PooledEmbeddings out;
  out.keys = keys;
  out.length_per_key = dims;
  out.values = std::move(values);
  return out;
}

// VBE: the groups' flat outputs joined, then one gather through their blocks and the inverse
// indices.
PooledEmbeddings vbe_output(std::vector<Awaitable<Variable>>& outs,
                            const std::vector<std::vector<detail::VbeBlock>>& blocks,
                            const std::vector<std::vector<int64_t>>& inverse,
                            const std::vector<std::string>& keys,
                            const std::vector<int64_t>& dims) {
  std::vector<Variable> flats;
  std::vector<detail::VbeBlock> all;
  int64_t base = 0;
  for (size_t i = 0; i < outs.size(); ++i) {
    const Variable y = outs[i].wait();
    for (detail::VbeBlock b : blocks[i]) {
      b.start += base;
      all.push_back(b);
    }
    base += y.value().numel();
    flats.push_back(reshape(y, {y.value().numel()}));
  }
  return keyed(keys, dims,
               detail::gather_vbe_output(flats.size() == 1 ? flats.front() : cat(flats, 0), all,
                                         dims, inverse));
}

// The groups' outputs [B, width of group g] put together as one [B, sum of widths] tensor in
// (feature, column) order: each block is copied once to its place, and backward copies the
// gradient's blocks back to their groups. (A split of every group's output and a cat of the
// pieces copied each block twice and made a tensor and a tape node per block: about 40 heap
// allocations per step with the planner's plan.) The blocks of a group cover its columns, so
// every column of a gradient is written.
class AssembleBlocks final : public Function {
 public:
  explicit AssembleBlocks(std::shared_ptr<const Assembly> assembly)
      : assembly_(std::move(assembly)), width_(assembly_->width) {}
  std::string name() const override { return "pooled_output"; }

  std::vector<Tensor> forward(Context&, const std::vector<Tensor>& groups) override {
    rows_ = groups[0].size(0);
    group_widths_.clear();
    for (const Tensor& g : groups) {
      FERRY_CHECK(g.dim() == 2 && g.size(0) == rows_ && g.dtype() == groups[0].dtype(),
                  InvalidArgument, "ShardedEmbeddingBagCollection: the sharding groups' outputs "
                  "must be [B, width] of one dtype with one B, given ", shape_str(g.shape()),
                  " ", dtype_name(g.dtype()), " beside ", shape_str(groups[0].shape()), " ",
                  dtype_name(groups[0].dtype()));
      group_widths_.push_back(g.size(1));
    }
    std::vector<Tensor> out = ferry::detail::tensor_list(1);
    out[0] = empty({rows_, width_}, groups[0].dtype());
    for (const BlockMove& m : assembly_->moves)
      copy_block(groups[m.group], group_widths_[m.group], m.from_col, out[0], width_, m.to_col,
                 m.width);
    return out;
  }

  std::vector<Tensor> backward(Context&, const std::vector<Tensor>& grad) override {
    std::vector<Tensor> out = ferry::detail::tensor_list(group_widths_.size());
    for (size_t g = 0; g < out.size(); ++g)
      out[g] = empty({rows_, group_widths_[g]}, grad[0].dtype());
    for (const BlockMove& m : assembly_->moves)
      copy_block(grad[0], width_, m.to_col, out[m.group], group_widths_[m.group], m.from_col,
                 m.width);
    return out;
  }

 private:
  // Columns [from, from + width) of every row of `src` (rows of src_width) to columns
  // [to, to + width) of `dst` (rows of dst_width).
  void copy_block(const Tensor& src, int64_t src_width, int64_t from, Tensor& dst,
                  int64_t dst_width, int64_t to, int64_t width) const {
    const size_t e = src.element_size();
    const char* s = static_cast<const char*>(src.raw_data()) + static_cast<size_t>(from) * e;
    char* d = static_cast<char*>(dst.raw_data()) + static_cast<size_t>(to) * e;
    const size_t s_row = static_cast<size_t>(src_width) * e;
    const size_t d_row = static_cast<size_t>(dst_width) * e;
    const size_t n = static_cast<size_t>(width) * e;
    for (int64_t r = 0; r < rows_; ++r, s += s_row, d += d_row) std::memcpy(d, s, n);
  }

  std::shared_ptr<const Assembly> assembly_;
  int64_t width_;
  int64_t rows_ = 0;
  ferry::detail::SmallVector<int64_t, 4> group_widths_;  // a group per sharding type at most
};

// The groups' outputs put in (feature, column) order.
PooledEmbeddings pooled_output(std::vector<Awaitable<Variable>>& outs,
                               const std::shared_ptr<const Assembly>& assembly,
                               const std::vector<std::string>& keys,
                               const std::vector<int64_t>& dims) {
  if (assembly->as_is) return keyed(keys, dims, outs[0].wait());
  ferry::detail::ScopedSpare<std::vector<Variable>> groups;  // kept by the thread
  for (Awaitable<Variable>& out : outs) groups->push_back(out.wait());
  auto assemble = ferry::detail::make_pooled<AssembleBlocks>(assembly);
  return keyed(keys, dims, ferry::detail::apply_first(std::move(assemble), *groups));
}
}  // namespace

ShardedInputDistAwaitable ShardedEmbeddingBagCollection::input_dist(
    Context& ctx, const KeyedJaggedTensor& features,
    const Variable& per_sample_weights) const {
  check_input(features, per_sample_weights);
  return start_input_dist(ctx, features, per_sample_weights);
}

ShardedInputDistAwaitable ShardedEmbeddingBagCollection::input_dist_checked(
    Context& ctx, const KeyedJaggedTensor& features) const {
  return start_input_dist(ctx, features, Variable());
}

ShardedInputDistAwaitable ShardedEmbeddingBagCollection::start_input_dist(
    Context& ctx, const KeyedJaggedTensor& features,
    const Variable& per_sample_weights) const {
  ctx.batch_size = features.stride();
  ctx.sharding_contexts.clear();
  const bool vbe = features.variable_stride_per_key();
  ctx.inverse_rows.clear();
  if (vbe) ctx.inverse_rows = detail::inverse_rows(features, feature_names(), input_dist_op(),
                                                   world());
  // Only weights that require grad need a route back; constant ones are the KJT's weights.
  const Variable trained = per_sample_weights.defined() && per_sample_weights.requires_grad()
                               ? per_sample_weights
                               : Variable();
  std::vector<DistFeaturesAwaitable> phase1;
  for (const auto& s : shardings_) {
    std::shared_ptr<PooledShardingContext> c = s->create_context();
    c->weights = trained;
    if (vbe) c->vbe_input = features;
    ctx.sharding_contexts.push_back(c);
    phase1.push_back(s->input_dist(features, c));
  }
  return detail::join_input_dists(std::move(phase1));
}

LazyAwaitable<PooledEmbeddings> ShardedEmbeddingBagCollection::compute_and_output_dist(
    Context& ctx, const std::vector<KeyedJaggedTensor>& dist_input) const {
  check_dist_input(ctx, dist_input, shardings_.size(),
                   "ShardedEmbeddingBagCollection::compute_and_output_dist");
  std::vector<Awaitable<Variable>> outs;
  outs.reserve(shardings_.size());
  bool vbe = !ctx.inverse_rows.empty();
  for (size_t i = 0; i < shardings_.size(); ++i) {
    const std::shared_ptr<PooledShardingContext> c = pooled_context(ctx.sharding_contexts[i]);
    outs.push_back(shardings_[i]->compute_and_output_dist(dist_input[i], c));
    vbe = vbe || c->vbe_input.has_value();
  }
  if (vbe) {
    std::vector<std::vector<detail::VbeBlock>> blocks;
    for (const auto& c : ctx.sharding_contexts) blocks.push_back(pooled_context(c)->vbe_blocks);
    return LazyAwaitable<PooledEmbeddings>(
        [outs = std::move(outs), blocks, inverse = ctx.inverse_rows,
         parts = output_parts_]() mutable {
          return vbe_output(outs, blocks, inverse, parts->keys, parts->dims);
        });
  }
  return LazyAwaitable<PooledEmbeddings>([outs = std::move(outs), parts = output_parts_]() mutable {
    return pooled_output(outs, parts->assembly, parts->keys, parts->dims);
  });
}

PooledEmbeddings ShardedEmbeddingBagCollection::forward(const KeyedJaggedTensor& features,
                                                        const Variable& per_sample_weights) const {
  Context ctx;
  std::vector<KeyedJaggedTensor> d = input_dist(ctx, features, per_sample_weights).wait().wait();
  return compute_and_output_dist(ctx, d).value();
}

}  // namespace ferry::torchrec
