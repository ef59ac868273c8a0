// all_reduce, reduce, reduce_scatter and reduce_scatter_v: validation, then the algorithm.
#include <ferry/collectives/algorithm_table.h>
#include <ferry/collectives/algorithms/algorithms.h>
#include <ferry/collectives/engine/engine.h>
#include <ferry/collectives/engine/issue.h>
#include <ferry/collectives/engine/reduce_kernels.h>
#include <ferry/collectives/ops/direct_post.h>
#include <ferry/collectives/ops/dispatch.h>
#include <ferry/collectives/shm/shm_ops.h>
#include <ferry/runtime/object_pool.h>
#include <ferry/runtime/small_vector.h>

#include <cstring>
#include <span>

namespace ferry {

namespace {

using detail::OpContext;
using detail::ReduceSpec;
template <class T>
using PooledList = std::vector<T, detail::PoolAllocator<T>>;

// The buffers a reduction runs on. 16-bit floats are widened to float32 once on the way in and
// rounded once on the way out, so sums accumulate in float32 whatever the algorithm. The widened
// copies live in the group's scratch (slots 2 and 3; the algorithms use 0 and 1), so repeated
// calls do not pay for fresh pages.
struct Accumulation {
  Tensor in;   // what the algorithm reads
  Tensor out;  // what it writes (may be `in`)
  ReduceSpec spec;

  Accumulation(OpContext& ctx, const Tensor& input, const Tensor& output, ReduceOp op,
               bool in_place) {
    const DType acc = detail::accumulation_dtype(input.dtype());
    spec = ReduceSpec{acc, op == ReduceOp::Avg ? ReduceOp::Sum : op};
    if (acc == input.dtype()) {
      in = input;
      out = output;
      return;
    }
    auto widened = [&](int slot, const Shape& shape) {
      return Tensor::from_blob(ctx.scratch(slot, shape_numel(shape) * dtype_size(acc)), shape, acc);
    };
    in = widened(2, input.shape());
    in.copy_(input);
    if (in_place)
      out = in;
    else if (output.defined())
      out = widened(3, output.shape());
  }

  // Divides for Avg and writes the result to the caller's output (rounding 16-bit floats once).
  void finish(Tensor& output, ReduceOp op, int world) {
    if (op == ReduceOp::Avg)
      detail::divide(out.raw_data(), static_cast<size_t>(out.numel()), out.dtype(), world);
    if (out.raw_data() != output.raw_data())
      output.copy_(out);
    else
      output.bump_version();
  }
};

// Reductions a native transport can start as they are (see engine/issue.h): no widening of
// 16-bit floats, no division for Avg afterwards.
bool natively_reducible(DType dtype, ReduceOp op) {
  return detail::accumulation_dtype(dtype) == dtype && op != ReduceOp::Avg;
}

// all_reduce's one native call, at issue on the caller's buffers or queued on the widened ones.
std::unique_ptr<NativeRequest> native_all_reduce(detail::GroupImpl& g, Algorithm algo,
                                                 const void* in, void* out, size_t count,
                                                 DType dtype, ReduceOp op) {
  return detail::call_native(g, Collective::AllReduce, algo,
                             [&](NativeCollectives& native, NativePath& path) {
                               return native.all_reduce(in, out, count, dtype, op, path);
                             });
}

// An average started at issue on a transport whose collectives have none (MPI's): the native
// sum, divided by the group's size in the output once it succeeded, as the queued body's
// Accumulation::finish divides (the same kernel: the same bits). Started at issue rather than
// queued because a queued op holds every later op of its group in the queue behind it: a
// gradient bucket's average ahead of the embeddings' gradient all-to-all made the two run one
// after the other.
class AverageOfSum final : public detail::NativeRequestThen, public detail::Pooled {
 public:
  AverageOfSum(std::unique_ptr<NativeRequest> sum, void* out, size_t count, DType dtype, int world)
      : out_(out), count_(count), dtype_(dtype), world_(world) {
    inner_ = std::move(sum);
  }

 private:
  void after_success() override { detail::divide(out_, count_, dtype_, world_); }

  void* out_;
  size_t count_;
  DType dtype_;
  int world_;
};

// reduce_scatter's one native call. Equal blocks (`sizes` empty) take the transport's form
// without lists: building them would cost a small op more than its MPI call.
std::unique_ptr<NativeRequest> native_reduce_scatter(detail::GroupImpl& g, Algorithm algo,
                                                     const void* in, void* out,
                                                     std::span<const int64_t> sizes,
                                                     size_t per_row, size_t out_count,
                                                     DType dtype, ReduceOp op) {
  return detail::call_native(
      g, Collective::ReduceScatter, algo, [&](NativeCollectives& native, NativePath& path) {
        if (sizes.empty()) return native.reduce_scatter_equal(in, out, out_count, dtype, op, path);
        std::vector<size_t> counts;
        counts.reserve(sizes.size());
        for (int64_t rows : sizes) counts.push_back(static_cast<size_t>(rows) * per_row);
        return native.reduce_scatter(in, out, counts, dtype, op, path);
      });
}

// reduce_scatter over blocks of `sizes` rows (`equal`: W blocks alike), run to completion.
detail::OpBody reduce_scatter_body(Tensor input, Tensor output, ReduceOp op,
                                   PooledList<int64_t> sizes, bool equal, int world,
                                   Algorithm algo) {
  return [input, output, op, sizes = std::move(sizes), equal, world,
          algo](OpContext& ctx) mutable {
    // The first element of this rank's block in `t` (its rows laid out as the input's).
    auto own_first = [&](const Tensor& t) {
      const size_t per_row =
          t.dim() == 0 || t.size(0) == 0 ? 0 : static_cast<size_t>(t.numel() / t.size(0));
      int64_t rows_before = 0;
      for (int k = 0; k < ctx.rank(); ++k) rows_before += sizes[static_cast<size_t>(k)];
      return static_cast<size_t>(rows_before) * per_row;
    };
    // Shared memory widens 16-bit floats a chunk at a time instead (the same bits).
    if (algo == Algorithm::SharedMemory &&
        detail::accumulation_dtype(input.dtype()) != input.dtype() &&
        detail::shm::reduce_scatter_widened(
            ctx, input.raw_data(), output.raw_data(), own_first(input),
            static_cast<size_t>(output.numel()), static_cast<size_t>(input.numel()),
            input.dtype(), op)) {
      output.bump_version();
      return std::vector<Tensor>{};
    }
    // An output that is exactly our block of the input is fine: the algorithm reads that block
    // only in its last step, elementwise, while writing the result.
    Accumulation a(ctx, input, output, op, /*in_place=*/false);
    if (uses_native_collectives(algo)) {
      // Native reductions must not write into their input: an output that is our block of the
      // input receives the result through scratch.
      const bool aliased = a.out.overlaps(a.in);
      char* out = aliased ? ctx.scratch(3, a.out.nbytes()) : static_cast<char*>(a.out.raw_data());
      const size_t per_row = a.in.dim() == 0 || a.in.size(0) == 0
                                 ? 0
                                 : static_cast<size_t>(a.in.numel() / a.in.size(0));
      ctx.wait_native(native_reduce_scatter(ctx.group(), algo, a.in.raw_data(), out,
                                            equal ? std::span<const int64_t>() : sizes, per_row,
                                            static_cast<size_t>(a.out.numel()), a.spec.dtype,
                                            a.spec.op),
                      {input, output});
      if (aliased && a.out.nbytes() > 0) std::memcpy(a.out.raw_data(), out, a.out.nbytes());
      a.finish(output, op, world);
      return std::vector<Tensor>{};
    }
    if (algo == Algorithm::SharedMemory) {  // records what ran itself
      detail::shm::reduce_scatter(ctx, a.in.raw_data(), a.out.raw_data(), own_first(a.in),
                                  static_cast<size_t>(a.out.numel()),
                                  static_cast<size_t>(a.in.numel()), a.spec.dtype, a.spec.op);
      a.finish(output, op, world);
      return std::vector<Tensor>{};
    }
    if (algo != Algorithm::Ring && algo != Algorithm::Hierarchical)
      detail::no_such_algorithm(Collective::ReduceScatter, algo);
    ctx.ran(Collective::ReduceScatter, algo);
    const detail::SpareBlocks blocks(sizes, row_bytes(a.in));
    const auto* in = static_cast<const char*>(a.in.raw_data());
    auto* out = static_cast<char*>(a.out.raw_data());
    if (algo == Algorithm::Hierarchical)
      detail::hierarchical_reduce_scatter(ctx, in, out, blocks.get(), a.spec);
    else
      detail::ring_reduce_scatter(ctx, in, nullptr, out, blocks.get(), a.spec);
    a.finish(output, op, world);
    return std::vector<Tensor>{};
  };
}

}  // namespace

Work all_reduce(Tensor tensor, const Group& group, ReduceOp op) {
  return all_reduce(tensor, tensor, group, op);
}

Work all_reduce(const Tensor& input, Tensor output, const Group& group, ReduceOp op) {
  detail::Validator v("all_reduce", group);
  v.defined(input, "input");
  v.defined(output, "output");
  v.same_dtype(output, "output", input.dtype(), "input");
  v.shape_is(output, "output", input.shape());
  v.no_overlap(input, "input", output, "output", input);
  v.reduce_op(op, input.dtype());
  const int world = group.size();
  // Chosen when issued, from what every rank agrees on, so all ranks run the same algorithm.
  const Algorithm algo = detail::algorithm_of(group, Collective::AllReduce, input.nbytes());
  const bool as_is = natively_reducible(input.dtype(), op);
  // Avg starts natively too (a sum, then the division), when no widening is needed.
  const bool average =
      op == ReduceOp::Avg && detail::accumulation_dtype(input.dtype()) == input.dtype();
  auto start = [&](NativeCollectives&) -> std::unique_ptr<NativeRequest> {
    output.bump_version();
    const size_t count = static_cast<size_t>(input.numel());
    if (!average)
      return native_all_reduce(group.impl(), algo, input.raw_data(), output.raw_data(), count,
                               input.dtype(), op);
    return std::make_unique<AverageOfSum>(
        native_all_reduce(group.impl(), algo, input.raw_data(), output.raw_data(), count,
                          input.dtype(), ReduceOp::Sum),
        output.raw_data(), count, input.dtype(), world);
  };
  auto post = [&](std::unique_ptr<OpContext> ctx) {
    return detail::post_direct_all_reduce_now(std::move(ctx), input, output, op);
  };
  auto post_shm = [&](std::unique_ptr<OpContext> ctx) {
    return detail::shm::post_all_reduce(std::move(ctx), input, output, op);
  };
  return detail::issue(group, {
      .name = "all_reduce",
      .what = detail::OpSummary::of(input, op),
      .native_start =
          detail::native_start_if(uses_native_collectives(algo) && (as_is || average), start),
      // The direct exchange posts all of its messages in one go; shared memory publishes this
      // rank's payload at once.
      .post = algo == Algorithm::Direct && as_is                   ? detail::OnePost(post)
              : algo == Algorithm::SharedMemory && (as_is || average) ? detail::OnePost(post_shm)
                                                                      : detail::OnePost(),
      .keep = {&input, &output},
      .body = [&] { return detail::OpBody([input = Tensor(input), output, op, world,
                                           algo](OpContext& ctx) mutable {
    const bool in_place = input.raw_data() == output.raw_data();
    const size_t count = static_cast<size_t>(input.numel());
    if (!uses_native_collectives(algo)) ctx.ran(Collective::AllReduce, algo);
    // Shared memory widens 16-bit floats a chunk at a time instead (the same bits).
    if (algo == Algorithm::SharedMemory &&
        detail::accumulation_dtype(input.dtype()) != input.dtype() &&
        detail::shm::all_reduce_widened(ctx, input.raw_data(), output.raw_data(), count,
                                        input.dtype(), op)) {
      output.bump_version();
      return std::vector<Tensor>{};
    }
    Accumulation a(ctx, input, output, op, in_place);
    const char* in = static_cast<const char*>(a.in.raw_data());
    char* out = static_cast<char*>(a.out.raw_data());
    switch (algo) {
      case Algorithm::Native:
      case Algorithm::Persistent:
      case Algorithm::Exchange:
        ctx.wait_native(
            native_all_reduce(ctx.group(), algo, in, out, count, a.spec.dtype, a.spec.op),
            {input, output});
        break;
      case Algorithm::Direct: detail::direct_all_reduce(ctx, in, out, count, a.spec); break;
      case Algorithm::RecursiveDoubling:
        detail::recursive_doubling_all_reduce(ctx, in, out, count, a.spec);
        break;
      case Algorithm::Ring: detail::ring_all_reduce(ctx, in, out, count, a.spec); break;
      case Algorithm::Hierarchical:
        detail::hierarchical_all_reduce(ctx, in, out, count, a.spec);
        break;
      case Algorithm::SharedMemory:
        detail::shm::all_reduce(ctx, in, out, count, a.spec.dtype, a.spec.op);
        break;
      default: detail::no_such_algorithm(Collective::AllReduce, algo);
    }
    a.finish(output, op, world);
    return std::vector<Tensor>{};
  }); }});
}

Work reduce(const Tensor& input, Tensor output, int root, const Group& group, ReduceOp op) {
  detail::Validator v("reduce", group);
  v.root(root);
  v.defined(input, "input");
  v.reduce_op(op, input.dtype());
  const bool is_root = group.rank() == root;
  if (is_root) {
    v.defined(output, "output (on root)");
    v.same_dtype(output, "output", input.dtype(), "input");
    v.shape_is(output, "output", input.shape());
    v.no_overlap(input, "input", output, "output", input);
  }
  const int world = group.size();
  const Algorithm algo = detail::algorithm_of(group, Collective::Reduce, input.nbytes());
  auto post_shm = [&](std::unique_ptr<OpContext> ctx) {
    if (is_root) output.bump_version();
    return detail::shm::post_reduce(std::move(ctx), input.raw_data(),
                                    is_root ? output.raw_data() : nullptr,
                                    static_cast<size_t>(input.numel()), root, input.dtype(), op);
  };
  return detail::issue(group, {
      .name = "reduce",
      .what = detail::OpSummary::of(input, op).with_root(root),
      // Shared memory: this rank's input published at issue, reduced by whoever waits.
      .post = algo == Algorithm::SharedMemory && natively_reducible(input.dtype(), op)
                  ? detail::OnePost(post_shm)
                  : detail::OnePost(),
      .keep = {&input, &output},
      .body = [&] {
        return detail::OpBody([input = Tensor(input), output, op, root, world, is_root,
                               algo](OpContext& ctx) mutable {
    Tensor out_arg = is_root ? output : Tensor();
    Accumulation a(ctx, input, out_arg, op, is_root && input.raw_data() == output.raw_data());
    const char* in = static_cast<const char*>(a.in.raw_data());
    char* out = is_root ? static_cast<char*>(a.out.raw_data()) : nullptr;
    const size_t count = static_cast<size_t>(input.numel());
    ctx.ran(Collective::Reduce, algo);
    switch (algo) {
      case Algorithm::Native:
        ctx.wait_native(ctx.native()->reduce(in, out, count, a.spec.dtype, a.spec.op, root),
                        {input, output});
        break;
      case Algorithm::Tree: detail::tree_reduce(ctx, in, out, count, root, a.spec); break;
      case Algorithm::SharedMemory:
        detail::shm::reduce(ctx, in, out, count, root, a.spec.dtype, a.spec.op);
        break;
      default: detail::no_such_algorithm(Collective::Reduce, algo);
    }
    if (is_root) a.finish(output, op, world);
    return std::vector<Tensor>{};
  }); }});
}

Work reduce_scatter_v(const Tensor& input, Tensor output, const std::vector<int64_t>& sizes,
                      const Group& group, ReduceOp op) {
  detail::Validator v("reduce_scatter", group);
  v.defined(input, "input");
  v.defined(output, "output");
  v.at_least_1d(input, "input");
  v.same_dtype(output, "output", input.dtype(), "input");
  v.reduce_op(op, input.dtype());
  const int64_t total = v.sizes(sizes, "sizes");
  if (total != input.size(0))
    v.fail(detail::str("sizes must add up to input.size(0) = ", input.size(0), ", given ",
                       total));
  const int me = group.rank();
  int64_t start = 0;
  for (int k = 0; k < me; ++k) start += sizes[k];
  Tensor own_block = input.narrow(0, start, sizes[me]);
  v.shape_is(output, "output", own_block.shape());
  v.no_overlap(input, "input", output, "output", own_block);
  const int world = group.size();
  const size_t per_row = input.size(0) == 0 ? 0 : static_cast<size_t>(input.numel() / input.size(0));
  const Algorithm algo = detail::algorithm_of(group, Collective::ReduceScatter, input.nbytes());
  auto start_native = [&](NativeCollectives&) {
    output.bump_version();
    return native_reduce_scatter(group.impl(), algo, input.raw_data(), output.raw_data(), sizes,
                                 per_row, static_cast<size_t>(output.numel()), input.dtype(),
                                 op);
  };
  auto post_shm = [&](std::unique_ptr<OpContext> ctx) {
    output.bump_version();
    return detail::shm::post_reduce_scatter(
        std::move(ctx), input.raw_data(), output.raw_data(), static_cast<size_t>(start) * per_row,
        static_cast<size_t>(output.numel()), static_cast<size_t>(input.numel()), input.dtype(),
        op);
  };
  return detail::issue(group, {
      .name = "reduce_scatter",
      .what = detail::OpSummary::of(input, op).with_splits(sizes),
      .native_start = detail::native_start_if(uses_native_collectives(algo) &&
                                                  natively_reducible(input.dtype(), op) &&
                                                  !output.overlaps(input),
                                              start_native),
      // Shared memory: this rank's input published at issue, its block reduced by whoever waits.
      .post = algo == Algorithm::SharedMemory && natively_reducible(input.dtype(), op)
                  ? detail::OnePost(post_shm)
                  : detail::OnePost(),
      .keep = {&input, &output},
      .body = [&] {
        return reduce_scatter_body(input, output, op,
                                   PooledList<int64_t>(sizes.begin(), sizes.end()),
                                   /*equal=*/false, world, algo);
      }});
}

Work reduce_scatter(const Tensor& input, Tensor output, const Group& group, ReduceOp op) {
  detail::Validator v("reduce_scatter", group);
  v.defined(input, "input");
  v.at_least_1d(input, "input");
  const int world = group.size();
  // torch.distributed's reduce_scatter_tensor takes (output, input): a call ported in that order
  // compiles, and would otherwise be reported only as a wrong shape.
  if (world > 1 && output.defined() && output.dim() == input.dim() && input.size(0) > 0 &&
      output.size(0) == input.size(0) * world)
    v.fail(detail::str("input ", shape_str(input.shape()), " and output ",
                       shape_str(output.shape()), " look swapped: ferry's reduce_scatter takes "
                       "(input, output, group) with W blocks in the input; torch.distributed's "
                       "reduce_scatter_tensor takes (output, input)"));
  if (input.size(0) % world != 0)
    v.fail(detail::str("input.size(0) must be a multiple of the group size ", world, ", given ",
                       input.size(0), " (use reduce_scatter_v for uneven blocks)"));
  // Equal blocks skip the block list reduce_scatter_v builds (allocations that would cost a
  // small op more than its MPI call), after the same checks in the same order.
  v.defined(output, "output");
  v.same_dtype(output, "output", input.dtype(), "input");
  v.reduce_op(op, input.dtype());
  const int64_t rows = input.size(0) / world;
  v.shape_with_rows_is(output, "output", input.shape(), rows);
  if (output.overlaps(input))  // only our own block of the input may be the output
    v.no_overlap(input, "input", output, "output", input.narrow(0, group.rank() * rows, rows));
  const Algorithm algo = detail::algorithm_of(group, Collective::ReduceScatter, input.nbytes());
  auto start = [&](NativeCollectives&) {
    output.bump_version();
    return native_reduce_scatter(group.impl(), algo, input.raw_data(), output.raw_data(), {}, 0,
                                 static_cast<size_t>(output.numel()), input.dtype(), op);
  };
  auto post_shm = [&](std::unique_ptr<OpContext> ctx) {
    output.bump_version();
    const size_t block = static_cast<size_t>(output.numel());
    return detail::shm::post_reduce_scatter(
        std::move(ctx), input.raw_data(), output.raw_data(),
        block * static_cast<size_t>(group.rank()), block, static_cast<size_t>(input.numel()),
        input.dtype(), op);
  };
  // Described and fingerprinted as reduce_scatter_v with equal blocks, the same call.
  return detail::issue(group, {
      .name = "reduce_scatter",
      .what = detail::OpSummary::of(input, op).with_equal_splits(world, rows),
      .native_start = detail::native_start_if(uses_native_collectives(algo) &&
                                                  natively_reducible(input.dtype(), op) &&
                                                  !output.overlaps(input),
                                              start),
      // Shared memory: this rank's input published at issue, its block reduced by whoever waits.
      .post = algo == Algorithm::SharedMemory && natively_reducible(input.dtype(), op)
                  ? detail::OnePost(post_shm)
                  : detail::OnePost(),
      .keep = {&input, &output},
      .body = [&] {
        return reduce_scatter_body(input, output, op, PooledList<int64_t>(world, rows),
                                   /*equal=*/true, world, algo);
      }});
}

Work reduce_scatter(const std::vector<Tensor>& inputs, Tensor output, const Group& group,
                    ReduceOp op) {
  detail::Validator v("reduce_scatter", group);
  v.defined(output, "output");
  v.tensor_list(inputs, "inputs", output.dtype());
  v.reduce_op(op, output.dtype());
  // Every input is rows of the same shape as inputs[0]'s; output is shaped like ours.
  const Tensor& first = inputs[0];
  detail::ScopedSpare<std::vector<int64_t>> spare_sizes;  // a list of this thread's
  std::vector<int64_t>& sizes = *spare_sizes;
  int64_t total = 0;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& t = inputs[k];
    bool rows_alike = t.dim() >= 1 && t.dim() == first.dim();
    for (int64_t d = 1; rows_alike && d < t.dim(); ++d) rows_alike = t.size(d) == first.size(d);
    if (!rows_alike)
      v.fail(detail::str("every input must be at least 1-D, with the row shape of inputs[0] ",
                         shape_str(first.shape()), ", given inputs[", k, "] ",
                         shape_str(t.shape())));
    if (t.overlaps(output)) v.fail(detail::str("output must not overlap inputs[", k, "]"));
    sizes.push_back(t.size(0));
    total += t.size(0);
  }
  v.shape_is(output, "output", inputs[static_cast<size_t>(group.rank())].shape());
  // Described and fingerprinted as the equivalent call on the inputs put end to end.
  detail::OpSummary summary = detail::OpSummary::of(first, op).with_splits(sizes);
  summary.dims[0] = total;
  summary.agreed = static_cast<int64_t>(row_bytes(first) / first.element_size()) * total;
  // The ring, the hierarchical algorithm and shared memory read each input where it lies. A
  // native transport's call takes one buffer, and widened or averaged sums run through
  // reduce_scatter_v's buffers: both get the inputs copied end to end first, as
  // torch.distributed's list form does (reduce_scatter_v asks the table again, with the same
  // bytes, and gets the same answer).
  const Algorithm algo =
      detail::algorithm_of(group, Collective::ReduceScatter,
                           static_cast<size_t>(total) * row_bytes(first));
  const bool shm = algo == Algorithm::SharedMemory &&
                   detail::shm::listed_reduce_scatter_fits(group.size());
  if ((algo != Algorithm::Ring && algo != Algorithm::Hierarchical && !shm) ||
      !natively_reducible(output.dtype(), op))
    return reduce_scatter_v(cat(inputs, 0), output, sizes, group, op);
  // Shared memory: this rank's blocks published where they lie at issue, its own block of
  // every rank's reduced by whoever waits (as reduce_scatter_v's, on one buffer).
  const int64_t per_row = static_cast<int64_t>(row_bytes(first) / first.element_size());
  int64_t before = 0;  // rows of the blocks ahead of this rank's
  for (int k = 0; k < group.rank(); ++k) before += sizes[static_cast<size_t>(k)];
  const auto own_first = static_cast<size_t>(before * per_row);
  const auto all = static_cast<size_t>(total * per_row);
  auto post_shm = [&](std::unique_ptr<OpContext> ctx) {
    output.bump_version();
    detail::SmallVector<detail::shm::InputPiece, 16> blocks;  // inline for up to 16 ranks
    for (const Tensor& t : inputs) {
      ctx->hold(t);  // the peers read it until the op completed
      blocks.push_back({t.raw_data(), t.nbytes()});
    }
    return detail::shm::post_reduce_scatter(
        std::move(ctx), std::span<const detail::shm::InputPiece>(blocks.begin(), blocks.size()),
        output.raw_data(), own_first, static_cast<size_t>(output.numel()), all, output.dtype(),
        op);
  };
  return detail::issue(group, {
      .name = "reduce_scatter",
      .what = summary,
      .post = shm ? detail::OnePost(post_shm) : detail::OnePost(),
      .keep = {&output},
      .body = [&] {
    // The lists copied into the pool's memory, which finds its way back to the issuing thread
    // when the group's worker drops the body (object_pool.h).
    return detail::OpBody([inputs = PooledList<Tensor>(inputs.begin(), inputs.end()), output,
                           op, sizes = PooledList<int64_t>(sizes.begin(), sizes.end()),
                           algo, own_first, all](OpContext& ctx) mutable {
    if (algo == Algorithm::SharedMemory) {  // records what ran itself
      detail::SmallVector<detail::shm::InputPiece, 16> blocks;
      for (const Tensor& t : inputs) blocks.push_back({t.raw_data(), t.nbytes()});
      detail::shm::reduce_scatter(
          ctx, std::span<const detail::shm::InputPiece>(blocks.begin(), blocks.size()),
          output.raw_data(), own_first, static_cast<size_t>(output.numel()), all,
          output.dtype(), op);
      output.bump_version();
      return std::vector<Tensor>{};
    }
    ctx.ran(Collective::ReduceScatter, algo);
    detail::SmallVector<const char*, 16> in_block;  // inline for up to 16 ranks
    for (const Tensor& t : inputs) in_block.push_back(static_cast<const char*>(t.raw_data()));
    const detail::SpareBlocks blocks(sizes, row_bytes(inputs[0]));
    auto* out = static_cast<char*>(output.raw_data());
    if (algo == Algorithm::Hierarchical)
      detail::hierarchical_reduce_scatter(ctx, in_block.begin(), out, blocks.get(),
                                          ReduceSpec{output.dtype(), op});
    else
      detail::ring_reduce_scatter(ctx, in_block.begin(), nullptr, out, blocks.get(),
                                  ReduceSpec{output.dtype(), op});
    output.bump_version();
    return std::vector<Tensor>{};
  }); }});
}

}  // namespace ferry
