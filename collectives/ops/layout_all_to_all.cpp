// all_to_all_single with a layout per block (collectives.h): the torchrec all-to-alls whose
// blocks are matrix columns or permuted segments move them through layouts instead of packing
// a copy on one side and unpacking one on the other.
#include <ferry/collectives/algorithms/algorithms.h>
#include <ferry/collectives/engine/engine.h>
#include <ferry/collectives/ops/direct_post.h>
#include <ferry/collectives/ops/dispatch.h>
#include <ferry/collectives/shm/shm_ops.h>
#include <ferry/runtime/object_pool.h>
#include <ferry/runtime/small_vector.h>

#include <array>
#include <cstring>

namespace ferry {
namespace {

using detail::OpContext;

// Checks that `layouts` holds one layout per rank and that each run lies inside `t`; returns
// the bytes of layouts[rank] (the block a rank keeps). Builds nothing: a call started at issue
// reads the layouts as they are.
size_t check_layouts(const detail::Validator& v, const Tensor& t,
                     const std::vector<BlockLayout>& layouts, const char* name, int rank) {
  const int world = v.group().size();
  if (layouts.size() != static_cast<size_t>(world))
    v.fail(detail::str(name, " must hold one layout per rank (", world, "), given ",
                       layouts.size()));
  size_t own = 0;
  const int64_t numel = t.numel();
  for (size_t k = 0; k < layouts.size(); ++k) {
    for (size_t i = 0; i < layouts[k].size(); ++i) {
      const StridedRun& r = layouts[k][i];
      auto bad = [&](const char* what) {
        v.fail(detail::str(name, "[", k, "][", i, "] = {offset ", r.offset, ", count ", r.count,
                           ", length ", r.length, ", stride ", r.stride, "}: ", what,
                           " (the tensor has ", numel, " elements)"));
      };
      if (r.offset < 0 || r.count < 0 || r.length < 0 || r.stride < 0)
        bad("every field must be >= 0");
      if (r.count == 0 || r.length == 0) continue;
      // The last piece ends at offset + (count - 1) * stride + length; compared in steps that
      // cannot overflow for any int64 fields.
      const int64_t room = numel - r.offset;
      if (r.offset > numel || r.length > room ||
          (r.count > 1 && r.stride > 0 && (room - r.length) / r.stride < r.count - 1))
        bad("it reaches past the end of the tensor");
      if (k == static_cast<size_t>(rank))
        own += static_cast<size_t>(r.count) * static_cast<size_t>(r.length) * t.element_size();
    }
  }
  return own;
}

// A checked layout in bytes over `t`'s storage (empty runs left out), its run list from this
// thread's spares (given back by the transport that carried it, or by the caller).
ByteLayout byte_layout(const Tensor& t, const BlockLayout& layout) {
  const size_t elem = t.element_size();
  ByteLayout out;
  out.base = static_cast<char*>(const_cast<void*>(t.raw_data()));
  out.runs = detail::spare_byte_runs();
  out.runs.reserve(layout.size());
  for (const StridedRun& r : layout) {
    if (r.count == 0 || r.length == 0) continue;
    out.runs.push_back(ByteRun{static_cast<size_t>(r.offset) * elem, static_cast<size_t>(r.count),
                               static_cast<size_t>(r.length) * elem,
                               static_cast<size_t>(r.stride) * elem});
  }
  return out;
}

// Where a checked layout's bytes start when they are one contiguous span of `t` (`bytes` of
// them), else null: such a block is sent or received as plain bytes, with no layout built.
char* span_of(const Tensor& t, const BlockLayout& layout, size_t& bytes) {
  const size_t elem = t.element_size();
  char* base = static_cast<char*>(const_cast<void*>(t.raw_data()));
  char* at = base;
  bytes = 0;
  for (const StridedRun& r : layout) {
    if (r.count == 0 || r.length == 0) continue;
    if (r.count > 1 && r.stride != r.length) return nullptr;
    char* starts = base + static_cast<size_t>(r.offset) * elem;
    if (bytes == 0) {
      at = starts;
    } else if (starts != at + bytes) {
      return nullptr;
    }
    bytes += static_cast<size_t>(r.count) * static_cast<size_t>(r.length) * elem;
  }
  return at;
}

// One part's tensors and layouts, by reference: the single-part call passes its arguments
// through without copying its layout lists (W + 1 allocations per side and copy).
struct PartRef {
  const Tensor& input;
  const std::vector<BlockLayout>& send_layouts;
  const Tensor& output;
  const std::vector<BlockLayout>& recv_layouts;
};

// The most parts an op posted at issue may have: its Work keeps two tensors per part alive
// (KeptBuffers). The KJT all-to-all moves two or three (lengths, values, weights).
constexpr size_t kMaxPostedParts = detail::kMaxKeptBuffers / 2;

// A block through its layout: as plain bytes when it is one contiguous span of its tensor, else
// through the layout in bytes (built only then).
void recv_block(OpContext& ctx, int from, uint32_t tag, const Tensor& t, const BlockLayout& l) {
  size_t bytes = 0;
  if (char* at = span_of(t, l, bytes)) {
    ctx.recv(from, tag, at, bytes);
  } else {
    ctx.recv(from, tag, byte_layout(t, l));
  }
}
void send_block(OpContext& ctx, int to, uint32_t tag, const Tensor& t, const BlockLayout& l) {
  size_t bytes = 0;
  if (const char* at = span_of(t, l, bytes)) {
    ctx.send(to, tag, at, bytes);
  } else {
    ctx.send(to, tag, byte_layout(t, l));
  }
}

// The pairwise exchange of every part through its layouts, posted in the order
// pairwise_all_to_all posts it (each step's peers, part by part, part p on tag p), so that the
// messages match whichever form a rank runs.
void post_laid_out(OpContext& ctx, const PartRef* parts, size_t num_parts) {
  const int n = ctx.size(), r = ctx.rank();
  for (int s = 1; s < n; ++s) {
    const int to = (r + s) % n, from = (r - s + n) % n;
    for (size_t p = 0; p < num_parts; ++p) {
      const uint32_t tag = static_cast<uint32_t>(p);
      recv_block(ctx, from, tag, parts[p].output, parts[p].recv_layouts[static_cast<size_t>(from)]);
      send_block(ctx, to, tag, parts[p].input, parts[p].send_layouts[static_cast<size_t>(to)]);
    }
  }
  // The own blocks, while the peers' are under way (no other block overlaps them).
  for (size_t p = 0; p < num_parts; ++p) {
    const BlockLayout& send = parts[p].send_layouts[static_cast<size_t>(r)];
    const BlockLayout& recv = parts[p].recv_layouts[static_cast<size_t>(r)];
    size_t in_bytes = 0, out_bytes = 0;
    const char* from = span_of(parts[p].input, send, in_bytes);
    char* to = span_of(parts[p].output, recv, out_bytes);
    if (from != nullptr && to != nullptr) {
      if (in_bytes > 0) std::memcpy(to, from, in_bytes);
      continue;
    }
    ByteLayout in_layout, out_layout;
    if (from == nullptr) in_layout = byte_layout(parts[p].input, send);
    if (to == nullptr) out_layout = byte_layout(parts[p].output, recv);
    if (from != nullptr) {
      unpack_layout(from, out_layout);
    } else if (to != nullptr) {
      pack_layout(in_layout, to);
    } else {
      copy_layout(in_layout, out_layout);
    }
    detail::give_byte_runs(std::move(in_layout.runs));
    detail::give_byte_runs(std::move(out_layout.runs));
  }
}

// Every part's blocks for a queued op or the shared-memory path, copied out of the caller's
// layouts (which may be gone by the time the op runs, or while peers still read this rank's
// send blocks) into two lists however many parts and ranks there are:
// a block that is one contiguous span of its tensor is kept as that span, any other as its runs
// in bytes. A list of byte layouts per part and side cost 2 + 2W allocations per part. The
// lists (and the parts' tensors, kept alive until the op ran) are ones an earlier op emptied on
// this thread, with their capacity: they go back to the thread that drops the op's body, so an
// issuing thread that also drops its bodies allocates none of them. Their memory comes from the
// pool (object_pool.h), whose blocks find their way back to the issuing thread when the group's
// worker drops the bodies instead (a queued op runs on whichever of the two comes first).
class QueuedBlocks final : public detail::shm::AllToAllBlocks, public detail::Pooled {
 public:
  QueuedBlocks(size_t parts, int world)
      : lists_(detail::ThreadSpares<Lists>::take()), parts_(parts),
        world_(static_cast<size_t>(world)) {}
  QueuedBlocks(QueuedBlocks&&) = default;
  QueuedBlocks& operator=(QueuedBlocks&&) = delete;
  ~QueuedBlocks() override {
    if (lists_.blocks.capacity() == 0 && lists_.runs.capacity() == 0 &&
        lists_.kept.capacity() == 0)
      return;  // moved from
    lists_.blocks.clear();
    lists_.runs.clear();
    lists_.kept.clear();
    detail::ThreadSpares<Lists>::give(std::move(lists_));
  }

  // Keeps `t` alive as long as the blocks.
  void keep(const Tensor& t) { lists_.kept.push_back(t); }
  auto& kept() { return lists_.kept; }

  // Appends every block of `layouts` over `t`; blocks are numbered in the order added.
  void add(const Tensor& t, const std::vector<BlockLayout>& layouts) {
    const size_t elem = t.element_size();
    char* base = static_cast<char*>(const_cast<void*>(t.raw_data()));
    for (const BlockLayout& l : layouts) {
      Block b{base, nullptr, 0, lists_.runs.size(), 0};
      b.span = span_of(t, l, b.bytes);
      if (b.span == nullptr) {
        for (const StridedRun& r : l) {
          if (r.count == 0 || r.length == 0) continue;
          lists_.runs.push_back(ByteRun{static_cast<size_t>(r.offset) * elem,
                                  static_cast<size_t>(r.count),
                                  static_cast<size_t>(r.length) * elem,
                                  static_cast<size_t>(r.stride) * elem});
          b.runs += 1;
        }
      }
      lists_.blocks.push_back(b);
    }
  }
  // Room for `blocks` blocks and the runs of `layouts` (an upper bound: a contiguous block
  // keeps none), so that each list is allocated once.
  void reserve(size_t blocks, size_t runs) {
    lists_.blocks.reserve(blocks);
    lists_.runs.reserve(runs);
  }
  static size_t runs_in(const std::vector<BlockLayout>& layouts) {
    size_t n = 0;
    for (const BlockLayout& l : layouts) n += l.size();
    return n;
  }

  void send(OpContext& ctx, int to, uint32_t tag, size_t block) const {
    const Block& b = lists_.blocks[block];
    if (b.span != nullptr) {
      ctx.send(to, tag, b.span, b.bytes);
    } else {
      ctx.send(to, tag, layout(b));
    }
  }
  void recv(OpContext& ctx, int from, uint32_t tag, size_t block) const {
    const Block& b = lists_.blocks[block];
    if (b.span != nullptr) {
      ctx.recv(from, tag, b.span, b.bytes);
    } else {
      ctx.recv(from, tag, layout(b));
    }
  }
  // Copies block `from` into block `to` (a rank's own block), as post_laid_out does.
  void copy(size_t from, size_t to) const {
    const Block& f = lists_.blocks[from];
    const Block& t = lists_.blocks[to];
    if (f.span != nullptr && t.span != nullptr) {
      if (f.bytes > 0) std::memcpy(t.span, f.span, f.bytes);
    } else if (f.span != nullptr) {
      detail::unpack_runs(f.span, runs(t));
    } else if (t.span != nullptr) {
      detail::pack_runs(runs(f), t.span);
    } else {
      detail::copy_runs(runs(f), runs(t));
    }
  }
  // The shared-memory path's view: blocks numbered as queued_blocks adds them.
  size_t parts() const override { return parts_; }
  detail::shm::BlockRef send(size_t part, int r) const override {
    return ref(lists_.blocks[(2 * part) * world_ + static_cast<size_t>(r)]);
  }
  detail::shm::BlockRef recv(size_t part, int r) const override {
    return ref(lists_.blocks[(2 * part + 1) * world_ + static_cast<size_t>(r)]);
  }

  // Where a block lies when it is one contiguous span of its tensor, else null; its bytes.
  char* span(size_t block) const { return lists_.blocks[block].span; }
  size_t bytes(size_t block) const {
    const Block& b = lists_.blocks[block];
    return b.span != nullptr ? b.bytes : detail::bytes_of(runs(b));
  }
  // A block that is not one span, from or into one contiguous buffer.
  void pack(size_t block, char* to) const { detail::pack_runs(runs(lists_.blocks[block]), to); }
  void unpack(const char* from, size_t block) const {
    detail::unpack_runs(from, runs(lists_.blocks[block]));
  }

 private:
  struct Block {
    char* base;    // the tensor's bytes
    char* span;    // where the block lies when contiguous, else null
    size_t bytes;  // its size when contiguous
    size_t first;  // else its runs: lists_.runs[first, first + runs)
    size_t runs;
  };
  detail::ByteRunsRef runs(const Block& b) const {
    return {b.base, lists_.runs.data() + b.first, b.runs};
  }
  detail::shm::BlockRef ref(const Block& b) const {
    if (b.span != nullptr) return {b.span, b.bytes, {}};
    return {nullptr, 0, runs(b)};
  }
  ByteLayout layout(const Block& b) const {
    ByteLayout l;
    l.base = b.base;
    l.runs = detail::spare_byte_runs();  // given back by the transport that carries it
    l.runs.assign(lists_.runs.begin() + static_cast<std::ptrdiff_t>(b.first),
                  lists_.runs.begin() + static_cast<std::ptrdiff_t>(b.first + b.runs));
    return l;
  }
  template <class T>
  using PooledList = std::vector<T, detail::PoolAllocator<T>>;
  struct Lists {
    PooledList<Block> blocks;
    PooledList<ByteRun> runs;
    PooledList<Tensor> kept;
  };
  Lists lists_;
  size_t parts_, world_;
};

// Every part's blocks, numbered [part][side][rank] (side 0 sends, 1 receives; see the two
// functions below), and, when `keep`, the parts' tensors kept, inputs and outputs in turn (an
// op started at issue has its Work keep them instead).
QueuedBlocks queued_blocks(const PartRef* parts, size_t num_parts, int world, bool keep = true) {
  QueuedBlocks blocks(num_parts, world);
  for (size_t p = 0; keep && p < num_parts; ++p) {
    blocks.keep(parts[p].input);
    blocks.keep(parts[p].output);
  }
  size_t runs = 0;
  for (size_t p = 0; p < num_parts; ++p)
    runs += QueuedBlocks::runs_in(parts[p].send_layouts) +
            QueuedBlocks::runs_in(parts[p].recv_layouts);
  blocks.reserve(2 * num_parts * static_cast<size_t>(world), runs);
  for (size_t p = 0; p < num_parts; ++p) {
    blocks.add(parts[p].input, parts[p].send_layouts);
    blocks.add(parts[p].output, parts[p].recv_layouts);
  }
  return blocks;
}
size_t send_block(size_t world, size_t part, size_t rank) { return (2 * part) * world + rank; }
size_t recv_block(size_t world, size_t part, size_t rank) {
  return (2 * part + 1) * world + rank;
}

// The queued form of post_laid_out, with the messages in the same order: the forms match
// whichever one a rank runs.
void run_queued_laid_out(OpContext& ctx, const QueuedBlocks& blocks, size_t num_parts) {
  const size_t n = static_cast<size_t>(ctx.size()), r = static_cast<size_t>(ctx.rank());
  auto send_block = [n](size_t part, size_t rank) { return ferry::send_block(n, part, rank); };
  auto recv_block = [n](size_t part, size_t rank) { return ferry::recv_block(n, part, rank); };
  for (size_t s = 1; s < n; ++s) {
    const size_t to = (r + s) % n, from = (r + n - s) % n;
    for (size_t p = 0; p < num_parts; ++p) {
      const uint32_t tag = static_cast<uint32_t>(p);
      blocks.recv(ctx, static_cast<int>(from), tag, recv_block(p, from));
      blocks.send(ctx, static_cast<int>(to), tag, send_block(p, to));
    }
  }
  for (size_t p = 0; p < num_parts; ++p) blocks.copy(send_block(p, r), recv_block(p, r));
  ctx.wait_all();
}

// On a transport with its own collectives (MPI), all parts move in one native call: per peer,
// one span per part. A block that is one contiguous span of its tensor goes as it is (a KJT's
// send side); the others of a part and side are packed into one staging buffer before the
// call, or unpacked out of one once it succeeded. One call instead of one per part in turn:
// the KJT all-to-all's two or three labels used to pay a round trip each. The block a rank
// keeps does not go through the call: it is copied from its send layout straight into its
// receive layout once the call succeeded (through the call it would be copied into staging
// and out again: two passes over it instead of one). The request owns the blocks (and so the
// tensors) and comes from the pool, its span lists inline: the op costs no allocation beyond
// the staging buffers'.
class NativeLayoutExchange final : public detail::NativeRequestThen, public detail::Pooled {
 public:
  // `blocks` as queued_blocks made them; `me` is this rank. `path` is the way the table chose;
  // it holds the way taken once constructed.
  NativeLayoutExchange(NativeCollectives& native, NativePath& path, int me, int world,
                       QueuedBlocks blocks, size_t parts)
      : blocks_(std::move(blocks)), parts_(parts), world_(static_cast<size_t>(world)),
        me_(static_cast<size_t>(me)) {
    out_.resize(world_ * parts_);
    in_.resize(world_ * parts_);
    for (size_t p = 0; p < parts_; ++p) {
      place(p, /*receive=*/false);
      place(p, /*receive=*/true);
    }
    inner_ = native.all_to_all_spans(SpanLists{out_.begin(), parts_},
                                     SpanLists{in_.begin(), parts_}, path);
  }

 private:
  size_t block(size_t part, bool receive, size_t rank) const {
    return receive ? recv_block(world_, part, rank) : send_block(world_, part, rank);
  }

  // Sets part p's span for every peer on one side (an empty one for this rank's own block):
  // where the block lies when it is one span, else in one staging buffer for the side's other
  // blocks (packed now for a send, unpacked after success for a receive).
  void place(size_t p, bool receive) {
    ByteSpan* spans = receive ? in_.begin() : out_.begin();
    size_t staged = 0;
    for (size_t k = 0; k < world_; ++k) {
      ByteSpan& s = spans[k * parts_ + p];
      const size_t b = block(p, receive, k);
      s = ByteSpan{blocks_.span(b), blocks_.bytes(b)};
      if (k == me_) s = ByteSpan{nullptr, 0};
      else if (s.data == nullptr) staged += s.bytes;
    }
    if (staged == 0) return;
    Tensor staging = empty({static_cast<int64_t>(staged)}, DType::UInt8);
    char* at = static_cast<char*>(staging.raw_data());
    blocks_.keep(staging);
    for (size_t k = 0; k < world_; ++k) {
      ByteSpan& s = spans[k * parts_ + p];
      if (k == me_ || s.data != nullptr) continue;
      s.data = at;
      at += s.bytes;
      if (receive) {
        unpack_.push_back({s.data, block(p, true, k)});
      } else {
        blocks_.pack(block(p, false, k), s.data);
      }
    }
  }

  // The staged blocks unpacked and this rank's own block copied, once the exchange succeeded.
  void after_success() override {
    for (const Unpack& u : unpack_) blocks_.unpack(u.from, u.block);
    for (size_t p = 0; p < parts_; ++p)
      blocks_.copy(send_block(world_, p, me_), recv_block(world_, p, me_));
  }

  struct Unpack {
    const char* from;  // in a staging buffer
    size_t block;
  };
  static constexpr size_t kInlineSpans = 12;  // three parts among four ranks
  QueuedBlocks blocks_;  // the parts' tensors and the staging, alive until done
  size_t parts_, world_, me_;
  detail::SmallVector<ByteSpan, kInlineSpans> out_, in_;
  detail::SmallVector<Unpack, kInlineSpans> unpack_;
};

// "input", or "parts[p].input" when there are several parts.
std::string part_name(size_t num_parts, size_t p, const char* tensor) {
  if (num_parts == 1) return tensor;
  std::string name = "parts[";
  name += std::to_string(p);
  name += "].";
  name += tensor;
  return name;
}

Work layout_all_to_all(const PartRef* parts, size_t num_parts, const Group& group) {
  detail::Validator v("all_to_all_single", group);
  if (num_parts == 0) v.fail("needs at least one part");
  const int me = group.rank();
  for (size_t p = 0; p < num_parts; ++p) {
    const PartRef& part = parts[p];
    // (Names for the error messages; not detail::str, whose stream cost a microsecond a call.)
    const std::string in = part_name(num_parts, p, "input");
    const std::string out = part_name(num_parts, p, "output");
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
    const size_t own_send = check_layouts(v, part.input, part.send_layouts, "send_layouts", me);
    const size_t own_recv = check_layouts(v, part.output, part.recv_layouts, "recv_layouts", me);
    if (own_send != own_recv)
      v.fail(detail::str("send_layouts[", me, "] and recv_layouts[", me, "]",
                         num_parts == 1 ? "" : detail::str(" of part ", p).c_str(),
                         " (the block a rank keeps) must hold as many elements, given ",
                         own_send / part.input.element_size(), " and ",
                         own_recv / part.input.element_size()));
  }
  // Per-peer sizes differ freely; each message's byte count is checked by the transports.
  detail::OpSummary summary = detail::OpSummary::of(parts[0].input).sizes_may_differ();
  summary.with_note(num_parts == 1 ? " with layouts" : " with layouts, several parts");
  // Asked with 0 bytes: the ranks' sizes differ, and the table must answer alike on all (on
  // one host it answers shared memory at every size).
  const Algorithm algo = detail::algorithm_of(group, Collective::AllToAll, 0);
  // On a transport without collectives of its own the parts post every message at once: the
  // op starts at issue, reading the layouts as they are (the Work keeps the parts' tensors
  // alive), and nothing of them is copied for a queued body. Through shared memory it starts at
  // issue too, with the blocks in bytes, which its peers read until it completed.
  const bool shm = algo == Algorithm::SharedMemory;
  const bool postable =
      num_parts <= kMaxPostedParts && (algo == Algorithm::Pairwise || shm);
  std::array<const Tensor*, detail::kMaxKeptBuffers> keep{};
  for (size_t p = 0; postable && p < num_parts; ++p) {
    keep[2 * p] = &parts[p].input;
    keep[2 * p + 1] = &parts[p].output;
  }
  auto post = [&](std::unique_ptr<OpContext> ctx) {
    for (size_t p = 0; p < num_parts; ++p) Tensor(parts[p].output).bump_version();
    ctx->ran(Collective::AllToAll, Algorithm::Pairwise);
    post_laid_out(*ctx, parts, num_parts);
    return detail::posted_exchange(std::move(ctx));
  };
  // Where the ranks cannot read each other's memory, the pairwise exchange over the same context.
  auto post_shm = [&](std::unique_ptr<OpContext> ctx) -> std::unique_ptr<detail::InFlight> {
    std::unique_ptr<detail::shm::AllToAllBlocks> blocks = std::make_unique<QueuedBlocks>(
        queued_blocks(parts, num_parts, group.size(), /*keep=*/false));
    if (auto started = detail::shm::post_all_to_all(ctx, blocks)) {
      for (size_t p = 0; p < num_parts; ++p) Tensor(parts[p].output).bump_version();
      return started;
    }
    return post(std::move(ctx));
  };
  // On a transport with collectives of its own the one native call starts at issue, as the
  // plain all_to_all_single's does: an op queued here would hold every later op of the group
  // in the queue behind it, and a queued op moves only once a thread runs it (on a host whose
  // ranks fill the cores, the thread that waits), so the KJT all-to-all issued before a
  // backward pass made the gradients' all-to-all and all_reduce wait for it in turn instead
  // of moving together with it.
  auto start = [&](NativeCollectives&) {
    for (size_t p = 0; p < num_parts; ++p) Tensor(parts[p].output).bump_version();
    return detail::call_native(group.impl(), Collective::AllToAll, algo,
                               [&](NativeCollectives& native, NativePath& path) {
                                 return std::make_unique<NativeLayoutExchange>(
                                     native, path, me, group.size(),
                                     queued_blocks(parts, num_parts, group.size()), num_parts);
                               });
  };
  return detail::issue(group, {
      .name = "all_to_all_single",
      .what = summary,
      .native_start = detail::native_start_if(uses_native_collectives(algo), start),
      .post = !postable ? detail::OnePost()
              : shm     ? detail::OnePost(post_shm)
                        : detail::OnePost(post),
      .keep = keep,
      .body = [&] {
    QueuedBlocks blocks = queued_blocks(parts, num_parts, group.size());
    if (algo == Algorithm::Pairwise || shm) {
      return detail::OpBody([blocks = std::move(blocks), num_parts, shm](OpContext& ctx) mutable {
        if (!shm || !detail::shm::all_to_all(ctx, blocks)) {
          ctx.ran(Collective::AllToAll, Algorithm::Pairwise);
          run_queued_laid_out(ctx, blocks, num_parts);
        }
        auto& keep = blocks.kept();
        for (size_t t = 1; t < keep.size(); t += 2) keep[t].bump_version();
        return std::vector<Tensor>{};
      });
    }
    // The transport's own collective, which takes the blocks along.
    return detail::OpBody([blocks = std::move(blocks), num_parts, algo](OpContext& ctx) mutable {
    if (!uses_native_collectives(algo)) detail::no_such_algorithm(Collective::AllToAll, algo);
    // The outputs count as written from here (the blocks, tensors included, go to the request).
    auto& keep = blocks.kept();
    for (size_t t = 1; t < keep.size(); t += 2) keep[t].bump_version();
    ctx.wait_native(detail::call_native(ctx.group(), Collective::AllToAll, algo,
                                        [&](NativeCollectives& native, NativePath& path) {
                                          return std::make_unique<NativeLayoutExchange>(
                                              native, path, ctx.rank(), ctx.size(),
                                              std::move(blocks), num_parts);
                                        }),
                    {});
    return std::vector<Tensor>{};
  }); }});
}

}  // namespace

Work all_to_all_single(const Tensor& input, const std::vector<BlockLayout>& send_layouts,
                       Tensor output, const std::vector<BlockLayout>& recv_layouts,
                       const Group& group) {
  const PartRef part{input, send_layouts, output, recv_layouts};
  return layout_all_to_all(&part, 1, group);
}

Work all_to_all_single(const std::vector<LayoutAllToAllPart>& parts, const Group& group) {
  auto ref = [](const LayoutAllToAllPart& p) {
    return PartRef{p.input, p.send_layouts, p.output, p.recv_layouts};
  };
  // The usual few parts (a KJT's lengths, values and weights) referred to from the stack: a
  // list per call was an allocation per input dist.
  switch (parts.size()) {
    case 1: {
      const PartRef refs[] = {ref(parts[0])};
      return layout_all_to_all(refs, 1, group);
    }
    case 2: {
      const PartRef refs[] = {ref(parts[0]), ref(parts[1])};
      return layout_all_to_all(refs, 2, group);
    }
    case 3: {
      const PartRef refs[] = {ref(parts[0]), ref(parts[1]), ref(parts[2])};
      return layout_all_to_all(refs, 3, group);
    }
    default: break;
  }
  std::vector<PartRef> refs;
  refs.reserve(parts.size());
  for (const LayoutAllToAllPart& p : parts) refs.push_back(ref(p));
  return layout_all_to_all(refs.data(), refs.size(), group);
}

}  // namespace ferry
