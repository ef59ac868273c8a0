// broadcast, all_gather(_v), all_to_all(_single), gather, scatter, barrier.
#include <ferry/collectives/algorithm_table.h>
#include <ferry/collectives/algorithms/algorithms.h>
#include <ferry/collectives/engine/engine.h>
#include <ferry/collectives/engine/native_issue.h>

#include <algorithm>
#include <cstring>

namespace ferry {
namespace {

using detail::OpContext;

char* bytes_of(Tensor& t) { return static_cast<char*>(t.raw_data()); }
const char* bytes_of(const Tensor& t) { return static_cast<const char*>(t.raw_data()); }

// The all_gather algorithm, chosen when the op is issued from the output size, which every rank
// agrees on (its own block size may differ between ranks in all_gather_v).
std::string all_gather_algorithm(size_t output_bytes, int world) {
  return choose_algorithm(Collective::AllGather, output_bytes / static_cast<size_t>(world), world);
}

// Block `rank` of `buf` is in place; afterwards every block is.
void all_gather_in_place(OpContext& ctx, char* buf, const detail::Blocks& blocks,
                         const std::string& algo, std::vector<Tensor> keep) {
  if (NativeCollectives* native = ctx.native())
    ctx.wait_native(native->all_gather(buf + blocks.offset[ctx.rank()], buf, blocks.bytes,
                                       blocks.offset),
                    std::move(keep));
  else if (algo == "direct")
    detail::direct_all_gather(ctx, buf, blocks);
  else
    detail::ring_all_gather(ctx, buf, blocks);
}

void gather_blocks(OpContext& ctx, Tensor& output, const Tensor& input,
                   const detail::Blocks& blocks, const std::string& algo) {
  char* out = bytes_of(output);
  if (NativeCollectives* native = ctx.native()) {
    // The transport places our own block too (or sees that it is in place).
    ctx.wait_native(native->all_gather(bytes_of(input), out, blocks.bytes, blocks.offset),
                    {input, output});
    output.bump_version();
    return;
  }
  // The algorithm sends our block from the input and copies it into place meanwhile.
  const char* own = bytes_of(input);
  if (algo == "direct")
    detail::direct_all_gather(ctx, out, blocks, own);
  else
    detail::ring_all_gather(ctx, out, blocks, own);
  output.bump_version();
}

// The elements of one row (dim 0 index), which must agree across ranks whose rows may differ.
int64_t elements_per_row(const Tensor& t) {
  int64_t n = 1;
  for (int64_t d = 1; d < t.dim(); ++d) n *= t.size(d);
  return n;
}

}  // namespace

Work broadcast(Tensor tensor, int root, const Group& group) {
  detail::Validator v("broadcast", group);
  v.root(root);
  v.defined(tensor, "tensor");
  auto work = detail::start_native_now(
      group, "broadcast", detail::OpSummary::of(tensor).with_root(root), {&tensor},
      [&](NativeCollectives& native) {
        if (group.rank() != root) tensor.bump_version();
        return native.broadcast(tensor.raw_data(), tensor.nbytes(), root);
      });
  if (work) return std::move(*work);
  return detail::submit(group, "broadcast", detail::OpSummary::of(tensor).with_root(root),
                        [tensor, root](OpContext& ctx) mutable {
    if (NativeCollectives* native = ctx.native())
      ctx.wait_native(native->broadcast(bytes_of(tensor), tensor.nbytes(), root), {tensor});
    else
      detail::tree_broadcast(ctx, bytes_of(tensor), tensor.nbytes(), root);
    if (ctx.rank() != root) tensor.bump_version();
    return std::vector<Tensor>{};
  });
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
  const std::string algo = all_gather_algorithm(output.nbytes(), group.size());
  return detail::submit(group, "all_gather",
                        detail::OpSummary::of(input)
                            .rows_may_differ(elements_per_row(input))
                            .with_splits(sizes),
                        [input, output, sizes, algo](OpContext& ctx) mutable {
    gather_blocks(ctx, output, input, detail::contiguous_blocks(sizes, row_bytes(input)),
                  algo);
    return std::vector<Tensor>{};
  });
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
  auto work = detail::start_native_now(
      group, "all_gather", detail::OpSummary::of(input), {&input, &output},
      [&](NativeCollectives& native) {
        output.bump_version();
        return native.all_gather_equal(input.raw_data(), output.raw_data(), block);
      });
  if (work) return std::move(*work);
  const std::string algo = all_gather_algorithm(output.nbytes(), world);
  return detail::submit(group, "all_gather", detail::OpSummary::of(input),
                        [input, output, rows, world, algo](OpContext& ctx) mutable {
    gather_blocks(ctx, output, input,
                  detail::contiguous_blocks(std::vector<int64_t>(world, rows),
                                            row_bytes(input)),
                  algo);
    return std::vector<Tensor>{};
  });
}

Work all_gather_v(const Tensor& input, const Group& group) {
  detail::Validator v("all_gather", group);
  v.defined(input, "input");
  v.at_least_1d(input, "input");
  const int world = group.size();
  return detail::submit(group, "all_gather",
                        detail::OpSummary::of(input)
                            .rows_may_differ(elements_per_row(input))
                            .with_note(" with exchanged sizes"),
                        [input, world](OpContext& ctx) {
    // Phase 1: every rank's (rows, elements per row), so the output can be sized and a rank
    // whose rows have another shape is named instead of corrupting the gather.
    Tensor meta = empty({2 * static_cast<int64_t>(world)}, DType::Int64);
    int64_t* m = meta.data<int64_t>();
    const int64_t row_numel = shape_numel(with_rows(input.shape(), 1));
    m[2 * ctx.rank()] = input.size(0);
    m[2 * ctx.rank() + 1] = row_numel;
    all_gather_in_place(ctx, bytes_of(meta),
                        detail::contiguous_blocks(std::vector<int64_t>(world, 1), 16), "direct",
                        {meta});
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
    gather_blocks(ctx, output, input, detail::contiguous_blocks(sizes, row_bytes(input)),
                  // Chosen only now that the total, which every rank agrees on, is known.
                  all_gather_algorithm(output.nbytes(), world));
    return std::vector<Tensor>{output, from_vector<int64_t>(sizes)};
  });
}

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
  auto splits_or_equal = [&](const std::vector<int64_t>& splits, const Tensor& t) {
    return splits.empty() ? std::vector<int64_t>(world, t.size(0) / world) : splits;
  };
  // Equal blocks: every rank gives as many elements; split lists: only the rows' shape agrees
  // (the transports check each block's byte count).
  detail::OpSummary summary = detail::OpSummary::of(input);
  if (!equal) summary.rows_may_differ(elements_per_row(input));
  auto work = detail::start_native_now(
      group, "all_to_all_single", summary, {&input, &output},
      [&](NativeCollectives& native) {
        output.bump_version();
        if (equal)
          return native.all_to_all_equal(input.raw_data(), output.raw_data(),
                                         input.nbytes() / static_cast<size_t>(world));
        const std::vector<int64_t> in_splits = splits_or_equal(input_split_sizes, input);
        const std::vector<int64_t> out_splits = splits_or_equal(output_split_sizes, output);
        const size_t rb = row_bytes(input);
        const detail::Blocks in_b = detail::contiguous_blocks(in_splits, rb);
        const detail::Blocks out_b = detail::contiguous_blocks(out_splits, rb);
        return native.all_to_all_single(input.raw_data(), in_b.bytes, in_b.offset,
                                        output.raw_data(), out_b.bytes, out_b.offset);
      });
  if (work) return std::move(*work);
  std::vector<int64_t> in_splits = splits_or_equal(input_split_sizes, input);
  std::vector<int64_t> out_splits = splits_or_equal(output_split_sizes, output);
  return detail::submit(group, "all_to_all_single", summary,
                        [input, output, in_splits, out_splits, world,
                         equal](OpContext& ctx) mutable {
    NativeCollectives* native = ctx.native();
    if (native && equal) {  // the same call as when started at issue
      ctx.wait_native(native->all_to_all_equal(bytes_of(input), bytes_of(output),
                                               input.nbytes() / static_cast<size_t>(world)),
                      {input, output});
      output.bump_version();
      return std::vector<Tensor>{};
    }
    const size_t rb = row_bytes(input);
    detail::Blocks in_b = detail::contiguous_blocks(in_splits, rb);
    detail::Blocks out_b = detail::contiguous_blocks(out_splits, rb);
    if (native) {
      ctx.wait_native(native->all_to_all_single(bytes_of(input), in_b.bytes, in_b.offset,
                                                bytes_of(output), out_b.bytes, out_b.offset),
                      {input, output});
      output.bump_version();
      return std::vector<Tensor>{};
    }
    detail::Exchange x;
    for (int k = 0; k < world; ++k) {
      x.send.push_back(bytes_of(input) + in_b.offset[k]);
      x.send_bytes.push_back(in_b.bytes[k]);
      x.recv.push_back(bytes_of(output) + out_b.offset[k]);
      x.recv_bytes.push_back(out_b.bytes[k]);
    }
    detail::pairwise_all_to_all(ctx, x);
    output.bump_version();
    return std::vector<Tensor>{};
  });
}

Work all_to_all_single(const Tensor& input, Tensor output, const Group& group) {
  return all_to_all_single(input, output, {}, {}, group);
}

Work all_to_all(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                const Group& group) {
  detail::Validator v("all_to_all", group);
  if (inputs.empty() || !inputs[0].defined())
    v.fail("inputs must hold one defined tensor per rank");
  const DType dtype = inputs[0].dtype();
  v.tensor_list(inputs, "inputs", dtype);
  v.tensor_list(outputs, "outputs", dtype);
  const int me = group.rank();
  if (inputs[me].nbytes() != outputs[me].nbytes())
    v.fail(detail::str("inputs[", me, "] and outputs[", me, "] (the block a rank keeps) must ",
                       "have the same size, given ", shape_str(inputs[me].shape()), " and ",
                       shape_str(outputs[me].shape())));
  for (size_t i = 0; i < outputs.size(); ++i) {
    for (size_t j = 0; j < inputs.size(); ++j)
      v.no_overlap(inputs[j], "an input", outputs[i], "an output");
    for (size_t j = i + 1; j < outputs.size(); ++j)
      v.no_overlap(outputs[i], "an output", outputs[j], "another output");
  }
  return detail::submit(group, "all_to_all", detail::OpSummary::of_lists(dtype),
                        [inputs, outputs = std::vector<Tensor>(outputs)](OpContext& ctx) mutable {
    detail::Exchange x;
    for (size_t k = 0; k < inputs.size(); ++k) {
      x.send.push_back(bytes_of(inputs[k]));
      x.send_bytes.push_back(inputs[k].nbytes());
      x.recv.push_back(bytes_of(outputs[k]));
      x.recv_bytes.push_back(outputs[k].nbytes());
    }
    if (NativeCollectives* native = ctx.native()) {
      std::vector<const void*> send(x.send.begin(), x.send.end());
      std::vector<void*> recv(x.recv.begin(), x.recv.end());
      std::vector<Tensor> keep = inputs;
      keep.insert(keep.end(), outputs.begin(), outputs.end());
      ctx.wait_native(native->all_to_all(send, x.send_bytes, recv, x.recv_bytes),
                      std::move(keep));
    } else {
      detail::pairwise_all_to_all(ctx, x);
    }
    for (Tensor& t : outputs) t.bump_version();
    return outputs;
  });
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
  return detail::submit(group, "gather",
                        detail::OpSummary::of(input).with_root(root).sizes_may_differ(),
                        [input, outputs = std::vector<Tensor>(outputs), root, is_root](OpContext& ctx) mutable {
    std::vector<char*> recv;
    std::vector<size_t> recv_bytes;
    if (is_root) {
      for (Tensor& o : outputs) {
        recv.push_back(bytes_of(o));
        recv_bytes.push_back(o.nbytes());
      }
    }
    if (NativeCollectives* native = ctx.native()) {
      std::vector<Tensor> keep = outputs;
      keep.push_back(input);
      ctx.wait_native(native->gather(bytes_of(input), input.nbytes(),
                                     std::vector<void*>(recv.begin(), recv.end()), recv_bytes,
                                     root),
                      std::move(keep));
    } else {
      detail::linear_gather(ctx, bytes_of(input), input.nbytes(), recv, recv_bytes, root);
    }
    if (!is_root) return std::vector<Tensor>{};
    for (Tensor& o : outputs) o.bump_version();
    return outputs;
  });
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
  return detail::submit(group, "scatter",
                        detail::OpSummary::of(output).with_root(root).sizes_may_differ(),
                        [inputs, output, root, is_root](OpContext& ctx) mutable {
    std::vector<const char*> send;
    std::vector<size_t> send_bytes;
    if (is_root) {
      for (const Tensor& i : inputs) {
        send.push_back(bytes_of(i));
        send_bytes.push_back(i.nbytes());
      }
    }
    if (NativeCollectives* native = ctx.native()) {
      std::vector<Tensor> keep = inputs;
      keep.push_back(output);
      ctx.wait_native(native->scatter(std::vector<const void*>(send.begin(), send.end()),
                                      send_bytes, bytes_of(output), output.nbytes(), root),
                      std::move(keep));
    } else {
      detail::linear_scatter(ctx, send, send_bytes, bytes_of(output), output.nbytes(), root);
    }
    output.bump_version();
    return std::vector<Tensor>{};
  });
}

Work barrier(const Group& group) {
  detail::Validator v("barrier", group);
  auto work = detail::start_native_now(group, "barrier", detail::OpSummary{}, {},
                                       [](NativeCollectives& native) { return native.barrier(); });
  if (work) return std::move(*work);
  return detail::submit(group, "barrier", detail::OpSummary{}, [](OpContext& ctx) {
    if (NativeCollectives* native = ctx.native())
      ctx.wait_native(native->barrier(), {});
    else
      detail::dissemination_barrier(ctx);
    return std::vector<Tensor>{};
  });
}

}  // namespace ferry
