// all_to_all_single, equal and with split sizes (collectives.h): the transport's own call, the
// pairwise exchange posted at issue, or single copy through shared memory on one host.
#include <ferry/collectives/algorithm_table.h>
#include <ferry/collectives/algorithms/algorithms.h>
#include <ferry/collectives/engine/engine.h>
#include <ferry/collectives/engine/issue.h>
#include <ferry/collectives/ops/direct_post.h>
#include <ferry/collectives/ops/dispatch.h>
#include <ferry/collectives/shm/shm_ops.h>
#include <ferry/runtime/object_pool.h>
#include <ferry/runtime/small_vector.h>

#include <algorithm>
#include <cstring>
#include <span>

namespace ferry {
namespace {

using detail::data_of;
using detail::elements_per_row;
using detail::OpContext;

// Where each rank's block of `t` lies: `splits` rows each (equal blocks when empty), for the
// pairwise exchange. Inline lists: a call of a few ranks allocates nothing for them.
using BlockPlaces = detail::SmallVector<size_t, 16>;
// Split sizes where they lie: the caller's lists, or a queued op's copies.
using Splits = std::span<const int64_t>;
void place_blocks(Splits splits, const Tensor& t, int world, BlockPlaces& offset,
                  BlockPlaces& bytes) {
  const size_t rb = row_bytes(t);
  size_t at = 0;
  for (int k = 0; k < world; ++k) {
    const int64_t rows = splits.empty() ? t.size(0) / world : splits[static_cast<size_t>(k)];
    offset.push_back(at);
    bytes.push_back(static_cast<size_t>(rows) * rb);
    at += bytes.back();
  }
}

// all_to_all_single's one native call: without split lists (`equal`), the transport's form
// without lists, which no block list is built for.
std::unique_ptr<NativeRequest> native_all_to_all_single(
    detail::GroupImpl& g, Algorithm algo, const Tensor& input, Tensor& output, Splits in_splits,
    Splits out_splits, bool equal) {
  return detail::call_native(
      g, Collective::AllToAll, algo, [&](NativeCollectives& native, NativePath& path) {
        const int world = g.size();
        if (equal)
          return native.all_to_all_equal(input.raw_data(), output.raw_data(),
                                         input.nbytes() / static_cast<size_t>(world), path);
        BlockPlaces in_offset, in_bytes, out_offset, out_bytes;
        place_blocks(in_splits, input, world, in_offset, in_bytes);
        place_blocks(out_splits, output, world, out_offset, out_bytes);
        const size_t n = static_cast<size_t>(world);
        return native.all_to_all_single(input.raw_data(), {in_bytes.begin(), n},
                                        {in_offset.begin(), n}, output.raw_data(),
                                        {out_bytes.begin(), n}, {out_offset.begin(), n}, path);
      });
}

// all_to_all_single's pairwise exchange, every message posted at once (over `ctx`, which waits
// for them).
void post_split_all_to_all(OpContext& ctx, const Tensor& input, Tensor& output, Splits in_splits,
                           Splits out_splits) {
  BlockPlaces send_offset, send_bytes, recv_offset, recv_bytes;
  place_blocks(in_splits, input, ctx.size(), send_offset, send_bytes);
  place_blocks(out_splits, output, ctx.size(), recv_offset, recv_bytes);
  ctx.ran(Collective::AllToAll, Algorithm::Pairwise);
  detail::post_pairwise_all_to_all(ctx, data_of(input), send_offset.begin(), send_bytes.begin(),
                                   data_of(output), recv_offset.begin(), recv_bytes.begin());
}

// all_to_all_single by single copy through shared memory (collectives/shm/): this rank's block
// for each rank and where each rank's block for it lands, as spans, inline (a pooled object
// when the op starts at issue and keeps them until it completed). Where the ranks cannot read
// each other's memory (every rank learns the same), the pairwise exchange instead, over the
// same context.
class SplitBlocks final : public detail::shm::AllToAllBlocks, public detail::Pooled {
 public:
  SplitBlocks(const Tensor& input, Tensor& output, Splits in_splits, Splits out_splits,
              int world) {
    place_blocks(in_splits, input, world, send_offset_, send_bytes_);
    place_blocks(out_splits, output, world, recv_offset_, recv_bytes_);
    in_ = const_cast<char*>(data_of(input));
    out_ = data_of(output);
  }
  size_t parts() const override { return 1; }
  detail::shm::BlockRef send(size_t, int r) const override {
    return {in_ + send_offset_[static_cast<size_t>(r)], send_bytes_[static_cast<size_t>(r)], {}};
  }
  detail::shm::BlockRef recv(size_t, int r) const override {
    return {out_ + recv_offset_[static_cast<size_t>(r)], recv_bytes_[static_cast<size_t>(r)], {}};
  }

 private:
  char* in_;
  char* out_;
  BlockPlaces send_offset_, send_bytes_, recv_offset_, recv_bytes_;
};

std::unique_ptr<detail::InFlight> post_shm_all_to_all(std::unique_ptr<OpContext> ctx,
                                                      const Tensor& input, Tensor& output,
                                                      Splits in_splits, Splits out_splits) {
  output.bump_version();
  std::unique_ptr<detail::shm::AllToAllBlocks> blocks =
      std::make_unique<SplitBlocks>(input, output, in_splits, out_splits, ctx->size());
  if (auto started = detail::shm::post_all_to_all(ctx, blocks)) return started;
  post_split_all_to_all(*ctx, input, output, in_splits, out_splits);
  return detail::posted_exchange(std::move(ctx));
}

}  // namespace

Work all_to_all_single(const Tensor& input, Tensor output,
                       const std::vector<int64_t>& output_split_sizes,
                       const std::vector<int64_t>& input_split_sizes, const Group& group) {
  detail::Validator v("all_to_all_single", group);
  v.defined(input, "input");
  v.defined(output, "output");
  v.at_least_1d(input, "input");
  v.at_least_1d(output, "output");
  v.same_dtype(output, "output", input.dtype(), "input");
  const int world = group.size();
  // Empty split lists mean equal blocks, as in torch.distributed. Checked here without
  // building the lists: equal blocks on a native transport never need them (see below).
  const int me = group.rank();
  auto own_rows = [&](const std::vector<int64_t>& splits, const Tensor& t, const char* name) {
    if (!splits.empty()) {
      const int64_t total = v.sizes(splits, name);
      if (total != t.size(0))
        v.fail(detail::str(name, " must add up to ", t.size(0), " (dim 0 of the tensor), given ",
                           total));
      return splits[static_cast<size_t>(me)];
    }
    if (t.size(0) % world != 0)
      v.fail(detail::str("without ", name, ", dim 0 (", t.size(0),
                         ") must be a multiple of the group size ", world));
    return t.size(0) / world;
  };
  const int64_t in_own = own_rows(input_split_sizes, input, "input_split_sizes");
  const int64_t out_own = own_rows(output_split_sizes, output, "output_split_sizes");
  const Shape& is = input.shape();
  const Shape& os = output.shape();
  if (is.size() != os.size() || !std::equal(is.begin() + 1, is.end(), os.begin() + 1))
    v.fail(detail::str("input and output must agree beyond dim 0, given ",
                       shape_str(input.shape()), " and ", shape_str(output.shape())));
  if (in_own != out_own)
    v.fail(detail::str("input_split_sizes[", me, "] and output_split_sizes[", me,
                       "] (the block a rank keeps) must be equal, given ", in_own, " and ",
                       out_own));
  v.no_overlap(input, "input", output, "output");
  const bool equal = input_split_sizes.empty() && output_split_sizes.empty();
  // Equal blocks: every rank gives as many elements; split lists: only the rows' shape agrees
  // (the transports check each block's byte count).
  detail::OpSummary summary = detail::OpSummary::of(input);
  if (!equal) summary.rows_may_differ(elements_per_row(input));
  // Equal blocks are as large on every rank; split lists ask with 0 bytes, as the ranks' sizes
  // differ and the table must answer alike on all (on one host it answers shared memory).
  const Algorithm algo = detail::algorithm_of(group, Collective::AllToAll,
                                              equal ? input.nbytes() : 0);
  auto start = [&](NativeCollectives&) {
    output.bump_version();
    return native_all_to_all_single(group.impl(), algo, input, output, input_split_sizes,
                                    output_split_sizes, equal);
  };
  // The pairwise exchange posts every message at once: on a transport without collectives of
  // its own it starts at issue, with its blocks' places computed on the stack.
  auto post = [&](std::unique_ptr<OpContext> ctx) {
    output.bump_version();
    post_split_all_to_all(*ctx, input, output, input_split_sizes, output_split_sizes);
    return detail::posted_exchange(std::move(ctx));
  };
  auto post_shm = [&](std::unique_ptr<OpContext> ctx) {
    return post_shm_all_to_all(std::move(ctx), input, output, input_split_sizes,
                               output_split_sizes);
  };
  return detail::issue(group, {
      .name = "all_to_all_single",
      .what = summary,
      .native_start = detail::native_start_if(uses_native_collectives(algo), start),
      .post = algo == Algorithm::Pairwise       ? detail::OnePost(post)
              : algo == Algorithm::SharedMemory ? detail::OnePost(post_shm)
                                                : detail::OnePost(),
      .keep = {&input, &output},
      .body = [&] {
    // The caller's split lists, copied for a queued op (equal blocks: empty lists, no copy),
    // into the pool's memory: the group's worker that drops them most often hands it back to
    // the issuing thread (object_pool.h), where a std::vector cost two allocations per op.
    using SplitCopy = std::vector<int64_t, detail::PoolAllocator<int64_t>>;
    const auto& ins = input_split_sizes;
    const auto& outs = output_split_sizes;
    return detail::OpBody([input = Tensor(input), output,
                           in_splits = SplitCopy(ins.begin(), ins.end()),
                           out_splits = SplitCopy(outs.begin(), outs.end()), equal,
                           algo](OpContext& ctx) mutable {
    if (uses_native_collectives(algo)) {  // the same call as when started at issue
      ctx.wait_native(native_all_to_all_single(ctx.group(), algo, input, output, in_splits,
                                               out_splits, equal),
                      {input, output});
      output.bump_version();
      return std::vector<Tensor>{};
    }
    if (algo == Algorithm::SharedMemory) {
      const SplitBlocks blocks(input, output, in_splits, out_splits, ctx.size());
      if (detail::shm::all_to_all(ctx, blocks)) {
        output.bump_version();
        return std::vector<Tensor>{};
      }
    } else if (algo != Algorithm::Pairwise) {
      detail::no_such_algorithm(Collective::AllToAll, algo);
    }
    // The messages of the form posted at issue, in the same order: they match whichever form
    // each rank runs.
    post_split_all_to_all(ctx, input, output, in_splits, out_splits);
    ctx.wait_all();
    output.bump_version();
    return std::vector<Tensor>{};
  }); }});
}

Work all_to_all_single(const Tensor& input, Tensor output, const Group& group) {
  return all_to_all_single(input, output, {}, {}, group);
}

}  // namespace ferry
