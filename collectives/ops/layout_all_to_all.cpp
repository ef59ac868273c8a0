// all_to_all_single with a layout per block (collectives.h): the torchrec all-to-alls whose
// blocks are matrix columns or permuted segments move them through layouts instead of packing
// a copy on one side and unpacking one on the other.
#include <ferry/collectives/algorithms/algorithms.h>
#include <ferry/collectives/engine/engine.h>

namespace ferry {
namespace {

using detail::OpContext;

// The layouts in bytes over `t`'s storage, each run checked to lie inside the tensor.
std::vector<ByteLayout> byte_layouts(const detail::Validator& v, const Tensor& t,
                                     const std::vector<BlockLayout>& layouts, const char* name) {
  const int world = v.group().size();
  if (layouts.size() != static_cast<size_t>(world))
    v.fail(detail::str(name, " must hold one layout per rank (", world, "), given ",
                       layouts.size()));
  const size_t elem = t.element_size();
  char* base = static_cast<char*>(const_cast<void*>(t.raw_data()));
  std::vector<ByteLayout> out(layouts.size());
  for (size_t k = 0; k < layouts.size(); ++k) {
    out[k].base = base;
    out[k].runs.reserve(layouts[k].size());
    for (size_t i = 0; i < layouts[k].size(); ++i) {
      const StridedRun& r = layouts[k][i];
      auto bad = [&](const char* what) {
        v.fail(detail::str(name, "[", k, "][", i, "] = {offset ", r.offset, ", count ", r.count,
                           ", length ", r.length, ", stride ", r.stride, "}: ", what,
                           " (the tensor has ", t.numel(), " elements)"));
      };
      if (r.offset < 0 || r.count < 0 || r.length < 0 || r.stride < 0)
        bad("every field must be >= 0");
      if (r.count == 0 || r.length == 0) continue;
      // The last piece ends at offset + (count - 1) * stride + length; compared in steps that
      // cannot overflow for any int64 fields.
      const int64_t room = t.numel() - r.offset;
      if (r.offset > t.numel() || r.length > room ||
          (r.count > 1 && r.stride > 0 && (room - r.length) / r.stride < r.count - 1))
        bad("it reaches past the end of the tensor");
      out[k].runs.push_back(ByteRun{static_cast<size_t>(r.offset) * elem,
                                    static_cast<size_t>(r.count),
                                    static_cast<size_t>(r.length) * elem,
                                    static_cast<size_t>(r.stride) * elem});
    }
  }
  return out;
}

// A native all-to-all takes, per peer, one block at an offset from one pointer: one native call
// per part, in turn (one at a time, so that a failed wait leaves no other native call in flight).
// A side whose blocks are all contiguous spans of its tensor goes as it is (a KJT's send side);
// the other side's blocks are packed into a staging buffer, or unpacked out of one.
void native_layout_all_to_all(OpContext& ctx, NativeCollectives& native,
                              const std::vector<std::vector<ByteLayout>>& send,
                              const std::vector<std::vector<ByteLayout>>& recv,
                              const std::vector<Tensor>& keep) {
  struct Side {
    std::vector<size_t> bytes, offset;
    Tensor staging;
    char* base = nullptr;
  };
  auto plan = [](const std::vector<ByteLayout>& layouts) {
    Side side;
    std::vector<char*> spans;  // each block's contiguous span, while every block has one
    size_t total = 0;
    for (const ByteLayout& l : layouts) {
      side.offset.push_back(total);
      side.bytes.push_back(l.bytes());
      total += side.bytes.back();
      if (char* span = contiguous_span(l); span && spans.size() == side.offset.size() - 1)
        spans.push_back(span);
    }
    if (spans.size() == layouts.size()) {
      side.base = layouts[0].base;
      for (size_t k = 0; k < layouts.size(); ++k)
        side.offset[k] = static_cast<size_t>(spans[k] - side.base);
    } else {
      side.staging = empty({static_cast<int64_t>(total)}, DType::UInt8);
      side.base = static_cast<char*>(side.staging.raw_data());
    }
    return side;
  };
  for (size_t p = 0; p < send.size(); ++p) {
    Side out = plan(send[p]), in = plan(recv[p]);
    if (out.staging.defined())
      for (size_t k = 0; k < send[p].size(); ++k) pack_layout(send[p][k], out.base + out.offset[k]);
    std::vector<Tensor> alive = keep;
    alive.push_back(out.staging);
    alive.push_back(in.staging);
    ctx.wait_native(native.all_to_all_single(out.base, out.bytes, out.offset, in.base, in.bytes,
                                             in.offset),
                    std::move(alive));
    if (in.staging.defined())
      for (size_t k = 0; k < recv[p].size(); ++k) unpack_layout(in.base + in.offset[k], recv[p][k]);
  }
}

// "input", or "parts[p].input" when there are several parts.
std::string part_name(size_t num_parts, size_t p, const char* tensor) {
  if (num_parts == 1) return tensor;
  std::string name = "parts[";
  name += std::to_string(p);
  name += "].";
  name += tensor;
  return name;
}

}  // namespace

Work all_to_all_single(const Tensor& input, const std::vector<BlockLayout>& send_layouts,
                       Tensor output, const std::vector<BlockLayout>& recv_layouts,
                       const Group& group) {
  return all_to_all_single({LayoutAllToAllPart{input, send_layouts, output, recv_layouts}}, group);
}

Work all_to_all_single(const std::vector<LayoutAllToAllPart>& parts, const Group& group) {
  detail::Validator v("all_to_all_single", group);
  if (parts.empty()) v.fail("needs at least one part");
  const int me = group.rank();
  std::vector<std::vector<ByteLayout>> send, recv;  // [part][rank]
  std::vector<Tensor> keep;                         // every part's tensors, alive until done
  for (size_t p = 0; p < parts.size(); ++p) {
    const LayoutAllToAllPart& part = parts[p];
    // (Names for the error messages; not detail::str, whose stream cost a microsecond a call.)
    const std::string in = part_name(parts.size(), p, "input");
    const std::string out = part_name(parts.size(), p, "output");
    v.defined(part.input, in.c_str());
    v.defined(part.output, out.c_str());
    v.same_dtype(part.output, out.c_str(), part.input.dtype(), in.c_str());
    v.no_overlap(part.input, in.c_str(), part.output, out.c_str());
    // Outputs are written: none may overlap another part's tensors (inputs may share memory).
    for (size_t q = 0; q < p; ++q) {
      v.no_overlap(parts[q].output, "an earlier part's output", part.output, out.c_str());
      v.no_overlap(parts[q].input, "an earlier part's input", part.output, out.c_str());
      v.no_overlap(part.input, in.c_str(), parts[q].output, "an earlier part's output");
    }
    send.push_back(byte_layouts(v, part.input, part.send_layouts, "send_layouts"));
    recv.push_back(byte_layouts(v, part.output, part.recv_layouts, "recv_layouts"));
    if (send[p][me].bytes() != recv[p][me].bytes())
      v.fail(detail::str("send_layouts[", me, "] and recv_layouts[", me, "]",
                         parts.size() == 1 ? "" : detail::str(" of part ", p).c_str(),
                         " (the block a rank keeps) must hold as many elements, given ",
                         send[p][me].bytes() / part.input.element_size(), " and ",
                         recv[p][me].bytes() / part.input.element_size()));
    keep.push_back(part.input);
    keep.push_back(part.output);
  }
  // Per-peer sizes differ freely; each message's byte count is checked by the transports.
  detail::OpSummary summary = detail::OpSummary::of(parts[0].input).sizes_may_differ();
  summary.with_note(parts.size() == 1 ? " with layouts" : " with layouts, several parts");
  return detail::submit(group, "all_to_all_single", summary,
                        [keep, send = std::move(send),
                         recv = std::move(recv)](OpContext& ctx) mutable {
    if (NativeCollectives* native = ctx.native()) {
      native_layout_all_to_all(ctx, *native, send, recv, keep);
    } else {
      detail::Exchange x;
      x.send_layout = std::move(send);
      x.recv_layout = std::move(recv);
      detail::pairwise_all_to_all(ctx, x);
    }
    for (size_t t = 1; t < keep.size(); t += 2) keep[t].bump_version();
    return std::vector<Tensor>{};
  });
}

}  // namespace ferry
