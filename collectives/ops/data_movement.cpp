// broadcast, all_gather(_v), gather, scatter, barrier (all_to_all_single with split sizes:
// all_to_all_single.cpp; with layouts: layout_all_to_all.cpp; of lists: list_all_to_all.cpp).
#include <ferry/collectives/algorithm_table.h>
#include <ferry/collectives/algorithms/algorithms.h>
#include <ferry/collectives/engine/engine.h>
#include <ferry/collectives/engine/issue.h>
#include <ferry/collectives/ops/direct_post.h>
#include <ferry/collectives/ops/dispatch.h>
#include <ferry/collectives/shm/shm_ops.h>

#include <algorithm>
#include <cstring>

namespace ferry {
namespace {

using detail::OpContext;

using detail::data_of;
using detail::elements_per_row;

// The all_gather algorithm, chosen from the output size, which every rank agrees on (its own
// block size may differ between ranks in all_gather_v). Every form has a shared-memory path.
Algorithm all_gather_algorithm(const detail::GroupImpl& g, size_t output_bytes) {
  const int world = g.size();
  return choose_algorithm(Collective::AllGather, output_bytes / static_cast<size_t>(world), world,
                          g.native() != nullptr, g.placement());
}
Algorithm all_gather_algorithm(const Group& group, size_t output_bytes) {
  return all_gather_algorithm(group.impl(), output_bytes);
}

// all_gather's one native call: equal blocks (`blocks` null, `block` bytes each) take the
// transport's form without lists. The transport places our own block too (or sees that it
// is in place).
std::unique_ptr<NativeRequest> native_all_gather(detail::GroupImpl& g, Algorithm algo,
                                                 const void* own, void* out,
                                                 const detail::Blocks* blocks, size_t block) {
  return detail::call_native(g, Collective::AllGather, algo,
                             [&](NativeCollectives& native, NativePath& path) {
                               if (blocks == nullptr)
                                 return native.all_gather_equal(own, out, block, path);
                               return native.all_gather(own, out, blocks->bytes, blocks->offset,
                                                        path);
                             });
}

// Gathers `blocks` into `out`; our own block is read from `own`, which may be its place in `out`.
// `input` and `output` are what a native call keeps alive should it never finish.
void all_gather_blocks(OpContext& ctx, const char* own, char* out, const detail::Blocks& blocks,
                       Algorithm algo, const Tensor& input, const Tensor& output) {
  if (algo == Algorithm::SharedMemory) {  // records what ran itself
    detail::shm::gather(ctx, detail::shm::GatherBlocks::listed(own, out, ctx.rank(), blocks),
                        Collective::AllGather);
    return;
  }
  if (!uses_native_collectives(algo)) ctx.ran(Collective::AllGather, algo);
  switch (algo) {
    case Algorithm::Native:
    case Algorithm::Persistent:
    case Algorithm::Exchange:
      ctx.wait_native(native_all_gather(ctx.group(), algo, own, out, &blocks, 0),
                      {input, output});
      break;
    // The algorithms send our block from `own` and copy it into place meanwhile.
    case Algorithm::Direct: detail::direct_all_gather(ctx, out, blocks, own); break;
    case Algorithm::Ring: detail::ring_all_gather(ctx, out, blocks, own); break;
    case Algorithm::Hierarchical: detail::hierarchical_all_gather(ctx, out, blocks, own); break;
    default: detail::no_such_algorithm(Collective::AllGather, algo);
  }
}

void gather_blocks(OpContext& ctx, Tensor& output, const Tensor& input,
                   const detail::Blocks& blocks, Algorithm algo) {
  all_gather_blocks(ctx, data_of(input), data_of(output), blocks, algo, input, output);
  output.bump_version();
}

// broadcast's one native call.
std::unique_ptr<NativeRequest> native_broadcast(detail::GroupImpl& g, Algorithm algo,
                                                Tensor& tensor, int root) {
  return detail::call_native(g, Collective::Broadcast, algo,
                             [&](NativeCollectives& native, NativePath& path) {
                               return native.broadcast(tensor.raw_data(), tensor.nbytes(), root,
                                                       path);
                             });
}

}  // namespace

Work broadcast(Tensor tensor, int root, const Group& group) {
  detail::Validator v("broadcast", group);
  v.root(root);
  v.defined(tensor, "tensor");
  const Algorithm algo = detail::algorithm_of(group, Collective::Broadcast, tensor.nbytes());
  auto start = [&](NativeCollectives&) {
    if (group.rank() != root) tensor.bump_version();
    return native_broadcast(group.impl(), algo, tensor, root);
  };
  auto post_shm = [&](std::unique_ptr<OpContext> ctx) {
    if (group.rank() != root) tensor.bump_version();
    return detail::shm::post_gather(
        std::move(ctx),
        std::make_unique<detail::shm::GatherBlocks>(detail::shm::GatherBlocks::broadcast(
            tensor.raw_data(), tensor.nbytes(), root, group.rank())),
        Collective::Broadcast);
  };
  return detail::issue(group, {
      .name = "broadcast",
      .what = detail::OpSummary::of(tensor).with_root(root),
      .native_start = detail::native_start_if(uses_native_collectives(algo), start),
      // Shared memory: the root's tensor published (a small one copied into the segment) at
      // issue, read by whoever waits.
      .post = algo == Algorithm::SharedMemory ? detail::OnePost(post_shm) : detail::OnePost(),
      .keep = {&tensor},
      .body = [&] { return detail::OpBody([tensor, root, algo](OpContext& ctx) mutable {
    switch (algo) {
      case Algorithm::SharedMemory:
        detail::shm::gather(ctx,
                            detail::shm::GatherBlocks::broadcast(tensor.raw_data(),
                                                                 tensor.nbytes(), root,
                                                                 ctx.rank()),
                            Collective::Broadcast);
        break;
      case Algorithm::Native:
      case Algorithm::Persistent:
      case Algorithm::Exchange:
        ctx.wait_native(native_broadcast(ctx.group(), algo, tensor, root), {tensor});
        break;
      case Algorithm::Tree:
        ctx.ran(Collective::Broadcast, algo);
        detail::tree_broadcast(ctx, data_of(tensor), tensor.nbytes(), root);
        break;
      default: detail::no_such_algorithm(Collective::Broadcast, algo);
    }
    if (ctx.rank() != root) tensor.bump_version();
    return std::vector<Tensor>{};
  }); }});
}

Work all_gather_v(const Tensor& input, Tensor output, const std::vector<int64_t>& sizes,
                  const Group& group) {
  detail::Validator v("all_gather", group);
  v.defined(input, "input");
  v.defined(output, "output");
  v.at_least_1d(input, "input");
  v.same_dtype(output, "output", input.dtype(), "input");
  const int64_t total = v.sizes(sizes, "sizes");
  const int me = group.rank();
  if (sizes[me] != input.size(0))
    v.fail(detail::str("sizes[", me, "] must equal input.size(0) = ", input.size(0), ", given ",
                       sizes[me]));
  v.shape_is(output, "output", with_rows(input.shape(), total));
  int64_t start = 0;
  for (int k = 0; k < me; ++k) start += sizes[k];
  v.no_overlap(output, "output", input, "input", output.narrow(0, start, sizes[me]));
  const Algorithm algo = all_gather_algorithm(group, output.nbytes());
  auto post_shm = [&](std::unique_ptr<OpContext> ctx) {
    output.bump_version();
    return detail::shm::post_gather(
        std::move(ctx),
        std::make_unique<detail::shm::GatherBlocks>(detail::shm::GatherBlocks::listed(
            data_of(input), data_of(output), me,
            detail::contiguous_blocks(sizes, row_bytes(input)))),
        Collective::AllGather);
  };
  return detail::issue(group, {
      .name = "all_gather",
      .what = detail::OpSummary::of(input)
                            .rows_may_differ(elements_per_row(input))
                            .with_splits(sizes),
      .post = algo == Algorithm::SharedMemory ? detail::OnePost(post_shm) : detail::OnePost(),
      .keep = {&input, &output},
      .body = [&] { return detail::OpBody([input = Tensor(input), output,
                                           sizes = std::vector<int64_t>(sizes),
                                           algo](OpContext& ctx) mutable {
    gather_blocks(ctx, output, input, detail::contiguous_blocks(sizes, row_bytes(input)),
                  algo);
    return std::vector<Tensor>{};
  }); }});
}

Work all_gather(const Tensor& input, Tensor output, const Group& group) {
  detail::Validator v("all_gather", group);
  v.defined(input, "input");
  v.defined(output, "output");
  v.same_dtype(output, "output", input.dtype(), "input");
  const int world = group.size();
  // torch.distributed's all_gather_into_tensor takes (output, input): a call ported in that
  // order compiles, and would otherwise be reported only as a wrong shape.
  if (world > 1 && input.dim() >= 1 && output.dim() == input.dim() && output.size(0) > 0 &&
      input.size(0) == output.size(0) * world)
    v.fail(detail::str("input ", shape_str(input.shape()), " and output ",
                       shape_str(output.shape()), " look swapped: ferry's all_gather takes "
                       "(input, output, group) with W blocks in the output; torch.distributed's "
                       "all_gather_into_tensor takes (output, input)"));
  // A 0-d input gathers into a vector of W elements, like torch.
  const int64_t rows = input.dim() == 0 ? 1 : input.size(0);
  v.shape_with_rows_is(output, "output", input.shape(), rows * world);
  const size_t block = input.nbytes();
  const char* own_place =
      static_cast<const char*>(output.raw_data()) + block * static_cast<size_t>(group.rank());
  v.no_overlap(output, "output", input, "input", own_place, block);
  const Algorithm algo = all_gather_algorithm(group, output.nbytes());
  auto start = [&](NativeCollectives&) {
    output.bump_version();
    return native_all_gather(group.impl(), algo, input.raw_data(), output.raw_data(), nullptr,
                             block);
  };
  auto post_shm = [&](std::unique_ptr<OpContext> ctx) {
    output.bump_version();
    return detail::shm::post_gather(
        std::move(ctx),
        std::make_unique<detail::shm::GatherBlocks>(detail::shm::GatherBlocks::equal(
            input.raw_data(), output.raw_data(), group.rank(), block)),
        Collective::AllGather);
  };
  return detail::issue(group, {
      .name = "all_gather",
      .what = detail::OpSummary::of(input),
      .native_start = detail::native_start_if(uses_native_collectives(algo), start),
      // Shared memory: this rank's block published (a small one copied into the segment) at
      // issue, the peers' read by whoever waits.
      .post = algo == Algorithm::SharedMemory ? detail::OnePost(post_shm) : detail::OnePost(),
      .keep = {&input, &output},
      .body = [&] {
        return detail::OpBody([input = Tensor(input), output, rows, world,
                               algo](OpContext& ctx) mutable {
    if (algo == Algorithm::SharedMemory) {
      detail::shm::gather(ctx,
                          detail::shm::GatherBlocks::equal(input.raw_data(), output.raw_data(),
                                                           ctx.rank(), input.nbytes()),
                          Collective::AllGather);
      output.bump_version();
      return std::vector<Tensor>{};
    }
    const detail::SpareBlocks blocks(static_cast<size_t>(world), world,
                                     static_cast<size_t>(rows) * row_bytes(input));
    gather_blocks(ctx, output, input, blocks.get(), algo);
    return std::vector<Tensor>{};
  }); }});
}

Work all_gather_v(const Tensor& input, const Group& group) {
  detail::Validator v("all_gather", group);
  v.defined(input, "input");
  v.at_least_1d(input, "input");
  const int world = group.size();
  return detail::issue(group, {
      .name = "all_gather",
      .what = detail::OpSummary::of(input)
                            .rows_may_differ(elements_per_row(input))
                            .with_note(" with exchanged sizes"),
      .body = [&] { return detail::OpBody([input = Tensor(input), world](OpContext& ctx) {
    // Phase 1: every rank's (rows, elements per row), so the output can be sized and a rank
    // whose rows have another shape is named instead of corrupting the gather.
    // Held by the context, as the output below: allocated here, they would otherwise be freed
    // as the body unwinds after a failure, while a receive not withdrawn may still write them.
    Tensor meta = empty({2 * static_cast<int64_t>(world)}, DType::Int64);
    ctx.hold(meta);
    int64_t* m = meta.data<int64_t>();
    const int64_t row_numel = shape_numel(with_rows(input.shape(), 1));
    m[2 * ctx.rank()] = input.size(0);
    m[2 * ctx.rank() + 1] = row_numel;
    // A step of the op, not its gather: the transport's own call where there is one, else
    // the one-round direct exchange (16 bytes a rank), whatever the table gives the gather.
    const detail::Blocks meta_blocks = detail::equal_blocks(world, 16);
    char* own_meta = data_of(meta) + meta_blocks.offset[ctx.rank()];
    if (ctx.native() != nullptr)  // its fastest way: not recorded as the op's algorithm
      ctx.wait_native(ctx.native()->all_gather(own_meta, data_of(meta), meta_blocks.bytes,
                                               meta_blocks.offset),
                      {meta});
    else
      detail::direct_all_gather(ctx, data_of(meta), meta_blocks, own_meta);
    std::vector<int64_t> sizes(world);
    int64_t total = 0;
    for (int k = 0; k < world; ++k) {
      FERRY_CHECK(m[2 * k + 1] == row_numel, MismatchError, "all_gather (seq ", ctx.seq(),
                  ") with exchanged sizes: rank ", ctx.rank(), " has rows of ", row_numel,
                  " elements (shape ", shape_str(input.shape()), ") but rank ", k, " has rows of ",
                  m[2 * k + 1], " elements");
      sizes[k] = m[2 * k];
      total += sizes[k];
    }
    ctx.next_phase();
    Tensor output = empty(with_rows(input.shape(), total), input.dtype());
    ctx.hold(output);
    gather_blocks(ctx, output, input, detail::contiguous_blocks(sizes, row_bytes(input)),
                  // Chosen only now that the total, which every rank agrees on, is known.
                  all_gather_algorithm(ctx.group(), output.nbytes()));
    return std::vector<Tensor>{output, from_vector<int64_t>(sizes)};
  }); }});
}

Work gather(const Tensor& input, const std::vector<Tensor>& outputs, int root,
            const Group& group) {
  detail::Validator v("gather", group);
  v.root(root);
  v.defined(input, "input");
  const bool is_root = group.rank() == root;
  if (is_root) {
    v.tensor_list(outputs, "outputs", input.dtype());
    if (outputs[root].nbytes() != input.nbytes())
      v.fail(detail::str("outputs[root] must have the size of input ", shape_str(input.shape()),
                         ", given ", shape_str(outputs[root].shape())));
    for (const Tensor& o : outputs) v.no_overlap(input, "input", o, "an output", outputs[root]);
  }
  // Asked with 0 bytes: the ranks' sizes may differ, and the table must answer alike on all.
  const Algorithm algo = detail::algorithm_of(group, Collective::Gather, 0);
  return detail::issue(group, {
      .name = "gather",
      .what = detail::OpSummary::of(input).with_root(root).sizes_may_differ(),
      .body = [&] {
        return detail::OpBody([input = Tensor(input), outputs = std::vector<Tensor>(outputs),
                               root, is_root,
                         algo](OpContext& ctx) mutable {
    ctx.ran(Collective::Gather, algo);
    std::vector<char*> recv;
    std::vector<size_t> recv_bytes;
    if (is_root) {
      for (Tensor& o : outputs) {
        recv.push_back(data_of(o));
        recv_bytes.push_back(o.nbytes());
      }
    }
    if (algo == Algorithm::Native) {
      std::vector<Tensor> keep = outputs;
      keep.push_back(input);
      ctx.wait_native(ctx.native()->gather(data_of(input), input.nbytes(),
                                           std::vector<void*>(recv.begin(), recv.end()),
                                           recv_bytes, root),
                      std::move(keep));
    } else if (algo == Algorithm::Linear) {
      detail::linear_gather(ctx, data_of(input), input.nbytes(), recv, recv_bytes, root);
    } else {
      detail::no_such_algorithm(Collective::Gather, algo);
    }
    if (!is_root) return std::vector<Tensor>{};
    for (Tensor& o : outputs) o.bump_version();
    return outputs;
  }); }});
}

Work scatter(const std::vector<Tensor>& inputs, Tensor output, int root, const Group& group) {
  detail::Validator v("scatter", group);
  v.root(root);
  v.defined(output, "output");
  const bool is_root = group.rank() == root;
  if (is_root) {
    v.tensor_list(inputs, "inputs", output.dtype());
    if (inputs[root].nbytes() != output.nbytes())
      v.fail(detail::str("inputs[root] must have the size of output ", shape_str(output.shape()),
                         ", given ", shape_str(inputs[root].shape())));
    for (const Tensor& i : inputs) v.no_overlap(i, "an input", output, "output", inputs[root]);
  }
  // Asked with 0 bytes: the ranks' sizes may differ, and the table must answer alike on all.
  const Algorithm algo = detail::algorithm_of(group, Collective::Scatter, 0);
  return detail::issue(group, {
      .name = "scatter",
      .what = detail::OpSummary::of(output).with_root(root).sizes_may_differ(),
      .body = [&] {
        return detail::OpBody([inputs = std::vector<Tensor>(inputs), output, root, is_root,
                               algo](OpContext& ctx) mutable {
    ctx.ran(Collective::Scatter, algo);
    std::vector<const char*> send;
    std::vector<size_t> send_bytes;
    if (is_root) {
      for (const Tensor& i : inputs) {
        send.push_back(data_of(i));
        send_bytes.push_back(i.nbytes());
      }
    }
    if (algo == Algorithm::Native) {
      std::vector<Tensor> keep = inputs;
      keep.push_back(output);
      ctx.wait_native(ctx.native()->scatter(std::vector<const void*>(send.begin(), send.end()),
                                            send_bytes, data_of(output), output.nbytes(), root),
                      std::move(keep));
    } else if (algo == Algorithm::Linear) {
      detail::linear_scatter(ctx, send, send_bytes, data_of(output), output.nbytes(), root);
    } else {
      detail::no_such_algorithm(Collective::Scatter, algo);
    }
    output.bump_version();
    return std::vector<Tensor>{};
  }); }});
}

Work barrier(const Group& group) {
  detail::Validator v("barrier", group);
  const Algorithm algo = detail::algorithm_of(group, Collective::Barrier, 0);
  // The one native call, at issue or queued.
  auto native_barrier = [algo](detail::GroupImpl& g) {
    return detail::call_native(g, Collective::Barrier, algo,
                               [](NativeCollectives& native, NativePath& path) {
                                 return native.barrier(path);
                               });
  };
  auto start = [&](NativeCollectives&) { return native_barrier(group.impl()); };
  auto post = [](std::unique_ptr<OpContext> ctx) {
    return detail::shm::post_barrier(std::move(ctx));
  };
  return detail::issue(group, {
      .name = "barrier",
      .what = detail::OpSummary{},
      .native_start = detail::native_start_if(uses_native_collectives(algo), start),
      // Shared memory: one flag published at issue, the peers' read by whoever waits.
      .post = algo == Algorithm::SharedMemory ? detail::OnePost(post) : detail::OnePost(),
      .body = [&] { return detail::OpBody([algo, native_barrier](OpContext& ctx) {
    switch (algo) {
      case Algorithm::SharedMemory:
        ctx.ran(Collective::Barrier, algo);
        detail::shm::barrier(ctx);
        break;
      case Algorithm::Native:
      case Algorithm::Persistent:
        ctx.wait_native(native_barrier(ctx.group()), {});
        break;
      case Algorithm::Dissemination:
        ctx.ran(Collective::Barrier, algo);
        detail::dissemination_barrier(ctx);
        break;
      default: detail::no_such_algorithm(Collective::Barrier, algo);
    }
    return std::vector<Tensor>{};
  }); }});
}

}  // namespace ferry
