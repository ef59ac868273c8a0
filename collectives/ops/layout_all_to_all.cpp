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

}  // namespace

Work all_to_all_single(const Tensor& input, const std::vector<BlockLayout>& send_layouts,
                       Tensor output, const std::vector<BlockLayout>& recv_layouts,
                       const Group& group) {
  detail::Validator v("all_to_all_single", group);
  v.defined(input, "input");
  v.defined(output, "output");
  v.same_dtype(output, "output", input.dtype(), "input");
  v.no_overlap(input, "input", output, "output");
  std::vector<ByteLayout> send = byte_layouts(v, input, send_layouts, "send_layouts");
  std::vector<ByteLayout> recv = byte_layouts(v, output, recv_layouts, "recv_layouts");
  const int me = group.rank();
  if (send[me].bytes() != recv[me].bytes())
    v.fail(detail::str("send_layouts[", me, "] and recv_layouts[", me, "] (the block a rank ",
                       "keeps) must hold as many elements, given ",
                       send[me].bytes() / input.element_size(), " and ",
                       recv[me].bytes() / input.element_size()));
  // Per-peer sizes differ freely; each message's byte count is checked by the transports.
  detail::OpSummary summary = detail::OpSummary::of(input).sizes_may_differ();
  summary.with_note(" with layouts");
  return detail::submit(group, "all_to_all_single", summary,
                        [input, output, send = std::move(send),
                         recv = std::move(recv)](OpContext& ctx) mutable {
    if (NativeCollectives* native = ctx.native()) {
      // A native all-to-all takes blocks at offsets from one pointer: a side whose every block
      // is one contiguous span of its tensor goes as it is; the other side is packed into (or
      // unpacked out of) a staging buffer.
      auto as_blocks = [](const std::vector<ByteLayout>& layouts, std::vector<size_t>& bytes,
                          std::vector<size_t>& offset) {
        bool spans = true;
        size_t total = 0;
        for (const ByteLayout& l : layouts) {
          bytes.push_back(l.bytes());
          offset.push_back(total);
          total += bytes.back();
          spans = spans && contiguous_span(l) != nullptr;
        }
        if (spans)
          for (size_t k = 0; k < layouts.size(); ++k)
            offset[k] = static_cast<size_t>(contiguous_span(layouts[k]) - layouts[k].base);
        return spans ? Tensor() : empty({static_cast<int64_t>(total)}, DType::UInt8);
      };
      std::vector<size_t> send_bytes, send_offset, recv_bytes, recv_offset;
      Tensor packed = as_blocks(send, send_bytes, send_offset);
      Tensor landed = as_blocks(recv, recv_bytes, recv_offset);
      char* p = packed.defined() ? static_cast<char*>(packed.raw_data())
                                 : static_cast<char*>(const_cast<void*>(input.raw_data()));
      char* l = landed.defined() ? static_cast<char*>(landed.raw_data())
                                 : static_cast<char*>(output.raw_data());
      if (packed.defined())
        for (size_t k = 0; k < send.size(); ++k) pack_layout(send[k], p + send_offset[k]);
      ctx.wait_native(native->all_to_all_single(p, send_bytes, send_offset, l, recv_bytes,
                                                recv_offset),
                      {input, output, packed, landed});
      if (landed.defined())
        for (size_t k = 0; k < recv.size(); ++k) unpack_layout(l + recv_offset[k], recv[k]);
    } else {
      detail::Exchange x;
      x.send_layout = std::move(send);
      x.recv_layout = std::move(recv);
      detail::pairwise_all_to_all(ctx, x);
    }
    output.bump_version();
    return std::vector<Tensor>{};
  });
}

}  // namespace ferry
