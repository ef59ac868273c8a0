#include <ferry/collectives/shm/shm_ops.h>

#include <ferry/collectives/engine/reduce_kernels.h>
#include <ferry/collectives/shm/shm_group.h>
#include <ferry/runtime/object_pool.h>
#include <ferry/runtime/shared_arena.h>
#include <ferry/runtime/tensor_detail.h>

#include <algorithm>
#include <cstring>
#include <exception>

#include <ferry/runtime/config.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/log.h>

namespace ferry::detail::shm {
namespace {

// What the ranks compare in shared memory before reading an op's data: the tag paths' hash
// (check_hash: the op, the dtype within its width, the reduce op, the root), and what their
// byte counts would have shown (the dtype itself, the element count, the split sizes), since
// nothing here counts bytes.
uint32_t shm_check(const Fingerprint& f, uint32_t check) {
  // check_hash(f), which the context computed already, with the three words mixed in a word at
  // a time (a multiply by an odd constant after each), then folded to 32 bits.
  constexpr uint64_t kOdd = 0x9E3779B97F4A7C15ull;
  uint64_t h = check;
  h = (h ^ f.dtype) * kOdd;
  h = (h ^ static_cast<uint64_t>(f.agreed)) * kOdd;
  h = (h ^ f.splits) * kOdd;
  const auto folded = static_cast<uint32_t>(h ^ (h >> 32));
  return folded == 0 ? 1 : folded;
}

// The op as the shared-memory state sees it: its wait gives up at the context's give-up time,
// leaving the diagnosis window to OpContext::fail_timeout_waiting_for.
OpRef op_of(const OpContext& ctx) {
  return OpRef{ctx.op(), ctx.seq(), ctx.give_up(), &ctx.fingerprint(),
               shm_check(ctx.fingerprint(), ctx.check()), &ctx, ctx.started_at()};
}

// Waits for op n on `shm` under the op's deadline; at it, the engine's diagnosis of the ranks
// that did not come (and of a rank stuck in another call, MismatchError).
void run_to_the_end(GroupShm& shm, uint32_t n, OpContext& ctx, const OpRef& ref) {
  if (shm.wait(n, ref.deadline, ref)) return;
  const std::string waiting_for = shm.not_arrived(n);
  shm.abandon();
  ctx.fail_timeout_waiting_for(waiting_for);
}

// The group's shared-memory state; a first op whose segment exchange times out (a rank is in
// another call: it skipped one) gets the engine's diagnosis, as any other timeout.
std::shared_ptr<GroupShm> shm_of(OpContext& ctx, const OpRef& ref) {
  try {
    return GroupShm::of(ctx.group(), ref);
  } catch (const TimeoutError&) {
    ctx.fail_timeout_waiting_for(str(" ", error_message(std::current_exception()), ";"));
  }
}

char* data_at(Tensor& t, size_t offset) { return static_cast<char*>(t.raw_data()) + offset; }

// Whether an op started at issue lets peers write into this rank's output (`*accepted`: it
// does, its output lying in shared memory, or an all_reduce's in memory ferry owns), which its
// Work then keeps for the life of the process if the op fails, moved away from the caller's
// tensor where it can be (ShmInFlight::move_output_on_failure): a peer that has not noticed
// the failure yet may still write. The forms run on a context pass none.
struct PeerWrites {
  bool accepted = false;
  // The output is memory ferry allocated, private to this process: a large all_reduce's peers
  // write their slices into it through the kernel (process_vm_writev), which moving it away if
  // the op fails makes safe, where the caller's own memory (from_blob) could not be moved.
  // (A gather's peers do not: writing their blocks through the kernel took 1.1-1.3x the time
  // of reading them at 1-16 MiB, 2 ranks; the all_reduce gains from keeping each rank's
  // slices in its own cache, which a gather has no counterpart of.)
  bool private_owned = false;
  // Whether an output of `bytes` at `out` takes them; records the answer.
  bool accept(const void* out, size_t bytes) {
    accepted = private_owned || in_shared_arena(out, std::max<size_t>(bytes, 1));
    return accepted;
  }
};

// An all_reduce of any size: through the slots when it fits them; above, by single copy from
// the peers' buffers, or, where the ranks cannot read each other's memory, slot by slot (each
// piece waited for before the next starts: a fallback, which the issuing thread runs to its end).
// Returns the op number that completes it.
uint32_t start_any_all_reduce(GroupShm& shm, OpContext& ctx, const OpRef& ref, const void* in,
                              void* out, size_t count, DType dtype, ReduceOp op,
                              PeerWrites* writes = nullptr) {
  const size_t elem = dtype_size(dtype);
  if (count * elem <= kSlotBytes) return shm.start_all_reduce(ref, in, out, count, dtype, op);
  if (shm.peers_readable(ref))
    return shm.start_large_all_reduce(ref, in, out, count, dtype, op, /*gather_here=*/true,
                                      writes != nullptr && writes->accept(out, count * elem));
  const size_t per = kSlotBytes / elem;
  uint32_t n = 0;
  for (size_t at = 0; at < count; at += per) {
    n = shm.start_all_reduce(ref, static_cast<const char*>(in) + at * elem,
                             static_cast<char*>(out) + at * elem, std::min(per, count - at),
                             dtype, op);
    run_to_the_end(shm, n, ctx, ref);
  }
  return n;
}

// An op started in shared memory: whoever tests or waits for its Work advances the group's
// shared-memory ops (shm_group.h); nothing of it is handed to another thread. It keeps its
// context for the diagnosis of a timeout.
class ShmInFlight final : public InFlight, public Pooled {
 public:
  ShmInFlight(std::shared_ptr<GroupShm> shm, uint32_t n, std::unique_ptr<OpContext> ctx,
              const OpRef& op, std::unique_ptr<AllToAllBlocks> blocks = nullptr)
      : shm_(std::move(shm)), n_(n), ctx_(std::move(ctx)), op_(op), blocks_(std::move(blocks)) {}

  // An all_reduce's Avg, run as a sum: its output is divided by the group's size once done.
  struct Average {
    void* out = nullptr;
    size_t count = 0;
    DType dtype = DType::Float32;
  };
  void average_when_done(const Average& a) { average_ = a; }

  bool test() override {
    return moving_output_on_failure([&] { return shm_->test(n_); });
  }
  bool poll_until(Clock::time_point deadline) override {
    return moving_output_on_failure(
        [&] { return shm_->wait(n_, std::min(deadline, op_.deadline), op_); });
  }
  void wait_to_the_end(GroupImpl&, const char*, uint64_t, Clock::time_point) override {
    moving_output_on_failure([&] { run_to_the_end(*shm_, n_, *ctx_, op_); });
  }
  std::vector<Tensor> finish() override {
    if (average_.out != nullptr) {
      divide(average_.out, average_.count, average_.dtype, shm_->size());
      average_.out = nullptr;
    }
    return {};
  }
  // Peers write into this rank's output (a large gather or all_reduce that accepted): if the
  // op fails here, a peer that has not noticed yet may still write, so the buffers are kept
  // for the process's life (buffers_kept).
  void keep_buffers_on_failure() { keep_on_failure_ = true; }
  // And where the output is `out` (an all_reduce's), it moves to fresh memory when the op
  // fails, before the failure reaches the caller: a late write lands in the old memory, which
  // nothing reads, and never in the caller's tensor (move_to_fresh_memory).
  void move_output_on_failure(const Tensor& out) {
    keep_on_failure_ = true;
    written_output_ = storage_of(out);
  }

  // Otherwise the caller's buffers are only read by peers, and only until every peer said
  // done. A failed op's peers may still be reading them (a stopped peer that resumes), but the
  // failure marked the group's segment before the Work fails (GroupShm::abandon), and a peer
  // checks that mark after its reads and before it says done: it fails its op rather than
  // completing it with the caller's new bytes. So nothing needs keeping for the process's life.
  bool buffers_kept() const override { return keep_on_failure_; }

  // Every shared-memory op can be given up on this rank (its wait sees the group's poison and
  // abandons the group's ops), and its peers are told, whether or not they write into its
  // output: the segment reaches only their shared-memory waits, while the transport's notice
  // fails their messages with this rank in the group too (a receive, a queued op), which would
  // otherwise wait until their deadline, or for ever.
  OnFailure on_failure() const override { return OnFailure::kPoisonTellPeers; }
  // A peer's part arrives within microseconds when it runs: poll before the full wait.
  bool polls_first() const override { return true; }

 private:
  std::shared_ptr<GroupShm> shm_;
  uint32_t n_;
  std::unique_ptr<OpContext> ctx_;
  OpRef op_;
  std::unique_ptr<AllToAllBlocks> blocks_;  // an all_to_all's, read until the op completed
  template <class F>
  auto moving_output_on_failure(F run) -> decltype(run()) {
    if (!written_output_) return run();
    try {
      return run();
    } catch (...) {
      if (std::shared_ptr<Storage> old = move_to_fresh_memory(*written_output_))
        keep_until_exit(std::move(old));
      written_output_.reset();
      throw;
    }
  }

  Average average_;
  bool keep_on_failure_ = false;
  std::shared_ptr<Storage> written_output_;  // its storage, while peers may write into it
};

// Whether the single copy can carry an all-to-all of `parts` parts: the ranks read each other's
// memory, and every rank's block places fit its slot.
bool single_copy_fits(GroupShm& shm, size_t parts, const OpRef& ref) {
  return GroupShm::all_to_all_fits(parts, shm.size()) && shm.peers_readable(ref);
}

// Whether a peer of this rank sends it a block of some bytes: else nobody would write into
// its output, which then need not be kept for the life of the process if the op fails (a
// broadcast's root; an all_gather_v rank whose peers all send no rows).
bool peers_send(const GatherBlocks& blocks, const GroupShm& shm) {
  for (int r = 0; r < shm.size(); ++r)
    if (r != shm.rank() && blocks.bytes(r) > 0) return true;
  return false;
}

// A gather of any size (shm_ops.h's post_gather says which way). Returns the op number that
// completes it.
uint32_t start_any_gather(GroupShm& shm, OpContext& ctx, const OpRef& ref,
                          const GatherBlocks& blocks, PeerWrites* writes = nullptr) {
  const size_t most = blocks.max_block();
  if (most <= GroupShm::kGatherPiece) return shm.start_gather(ref, blocks, 0);
  // The single copy needs a block place per rank in a slot (up to 961 ranks); above, or where
  // the ranks cannot read each other's memory, piece by piece through the slots.
  if (shm.peers_readable(ref) && GroupShm::large_gather_fits(shm.size()))
    return shm.start_large_gather(ref, blocks,
                                  writes != nullptr && peers_send(blocks, shm) &&
                                      writes->accept(blocks.out(), 1));
  uint32_t n = 0;
  for (size_t at = 0; at < most; at += GroupShm::kGatherPiece) {
    n = shm.start_gather(ref, blocks, at);
    run_to_the_end(shm, n, ctx, ref);
  }
  return n;
}

// A reduce_scatter of any size (shm_ops.h says which way). Returns the op number that
// completes it.
// `blocks`: the list form's input (then `in` is unused).
uint32_t start_any_reduce_scatter(GroupShm& shm, OpContext& ctx, const OpRef& ref,
                                  const void* in, std::span<const InputPiece> blocks, void* out,
                                  size_t first, size_t count, size_t total, DType dtype,
                                  ReduceOp op) {
  const size_t elem = dtype_size(dtype);
  if (total * elem <= kSlotBytes) {
    if (!blocks.empty())
      return shm.start_all_reduce(ref, blocks, out, total, dtype, op, first, count);
    return shm.start_all_reduce(ref, in, out, total, dtype, op, first, count);
  }
  if (shm.peers_readable(ref))
    return shm.start_reduce_scatter(ref, in, out, first, count, dtype, op, blocks);
  if (!blocks.empty()) {  // the fallback below reduces one buffer
    Tensor joined = empty({static_cast<int64_t>(total)}, dtype);
    ctx.hold(joined);
    char* to = data_at(joined, 0);
    for (const InputPiece& piece : blocks) {
      if (piece.bytes > 0) std::memcpy(to, piece.data, piece.bytes);
      to += piece.bytes;
    }
    in = joined.raw_data();
  }
  Tensor whole = empty({static_cast<int64_t>(total)}, dtype);
  ctx.hold(whole);
  const uint32_t n = start_any_all_reduce(shm, ctx, ref, in, whole.raw_data(), total, dtype, op);
  run_to_the_end(shm, n, ctx, ref);
  if (count > 0) std::memcpy(out, data_at(whole, first * elem), count * elem);
  return n;
}

// A reduce of any size (shm_ops.h says which way). Returns the op number that completes it.
uint32_t start_any_reduce(GroupShm& shm, OpContext& ctx, const OpRef& ref, const void* in,
                          void* out, size_t count, int root, DType dtype, ReduceOp op,
                          PeerWrites* writes = nullptr) {
  const size_t elem = dtype_size(dtype);
  const bool is_root = shm.rank() == root;
  if (count * elem <= kSlotBytes || !shm.peers_readable(ref)) {
    // The slot path, or slot by slot: every rank reduces, only the root keeps the result.
    const size_t per = kSlotBytes / elem;
    uint32_t n = 0;
    size_t at = 0;
    do {
      const size_t piece = std::min(per, count - at);
      n = shm.start_all_reduce(ref, static_cast<const char*>(in) + at * elem,
                               is_root ? static_cast<char*>(out) + at * elem : nullptr, piece,
                               dtype, op);
      at += piece;
      if (at < count) run_to_the_end(shm, n, ctx, ref);
    } while (at < count);
    return n;
  }
  if (is_root)
    return shm.start_large_all_reduce(ref, in, out, count, dtype, op, /*gather_here=*/true,
                                      writes != nullptr && writes->accept(out, count * elem));
  // A rank other than the root keeps only its slice, in memory the op holds, published as
  // the base of a whole tensor would be (the root reads the slice at its offset from it).
  const size_t first = count * static_cast<size_t>(shm.rank()) / static_cast<size_t>(shm.size());
  const size_t last =
      count * static_cast<size_t>(shm.rank() + 1) / static_cast<size_t>(shm.size());
  Tensor slice = empty({static_cast<int64_t>(std::max<size_t>(last - first, 1))}, dtype);
  ctx.hold(slice);
  const uintptr_t base = reinterpret_cast<uintptr_t>(slice.raw_data()) - first * elem;
  return shm.start_large_all_reduce(ref, in, reinterpret_cast<void*>(base), count, dtype, op,
                                    /*gather_here=*/false);
}

}  // namespace

Tensor empty_for_peers(Shape shape, DType dtype, const GroupImpl& g, const char* why) {
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  if (g.size() > 1 && bytes > kSlotBytes && g.one_host()) {
    try {
      return empty_shared(shape, dtype);
    } catch (const Error& e) {
      FERRY_LOG(Info, "shm", why, " stays in ordinary memory: ", e.what());
    }
  }
  return empty(std::move(shape), dtype);
}

void prepare_group(GroupImpl& g) {
  if (g.size() < 2 || !g.one_host()) return;
  const Clock::time_point now = Clock::now();
  GroupShm::of(g, OpRef{"making the group", g.sequence_number(), now + default_timeout(), nullptr,
                        0, nullptr, now});
}

std::unique_ptr<InFlight> post_all_reduce(std::unique_ptr<OpContext> ctx, const Tensor& input,
                                          Tensor& output, ReduceOp op) {
  const OpRef ref = op_of(*ctx);
  std::shared_ptr<GroupShm> shm = shm_of(*ctx, ref);
  output.bump_version();
  ctx->ran(Collective::AllReduce, Algorithm::SharedMemory);
  const bool average = op == ReduceOp::Avg;
  const size_t count = static_cast<size_t>(input.numel());
  PeerWrites writes;
  writes.private_owned = storage_of(output)->owned_;
  const uint32_t n = start_any_all_reduce(*shm, *ctx, ref, input.raw_data(), output.raw_data(),
                                          count, input.dtype(), average ? ReduceOp::Sum : op,
                                          &writes);
  auto started = std::make_unique<ShmInFlight>(std::move(shm), n, std::move(ctx), ref);
  if (average) started->average_when_done({output.raw_data(), count, input.dtype()});
  if (writes.accepted) started->move_output_on_failure(output);
  return started;
}

void all_reduce(OpContext& ctx, const void* in, void* out, size_t count, DType dtype,
                ReduceOp op) {
  const OpRef ref = op_of(ctx);
  std::shared_ptr<GroupShm> shm = shm_of(ctx, ref);
  const uint32_t n = start_any_all_reduce(*shm, ctx, ref, in, out, count, dtype, op);
  run_to_the_end(*shm, n, ctx, ref);
}

namespace {

// A 16-bit op of `bytes` by single copy (`start(shm, ref)` starts it), run to its end, where
// it is above the slots and the ranks can read each other's memory; else false, nothing done.
template <class Start>
bool run_widened(OpContext& ctx, size_t bytes, Start start) {
  if (bytes <= kSlotBytes) return false;
  const OpRef ref = op_of(ctx);
  std::shared_ptr<GroupShm> shm = shm_of(ctx, ref);
  if (!shm->peers_readable(ref)) return false;
  run_to_the_end(*shm, start(*shm, ref), ctx, ref);
  return true;
}

}  // namespace

bool all_reduce_widened(OpContext& ctx, const void* in, void* out, size_t count, DType dtype,
                        ReduceOp op) {
  // Among more than 2 ranks a small one reads the peers' private 16-bit inputs through the
  // kernel slower than the float32 copies in shared memory are mapped and read (bfloat16, 4
  // ranks on 2 cores, alternated runs: 32 KiB 110-116 us against 95, 64 KiB 108-153 against
  // 74-117; 128 KiB 180 against 251). Every rank has the same size and group: the same answer.
  constexpr size_t kWidenedMinBytesAmongMany = 128 * 1024;
  if (ctx.size() > 2 && count * dtype_size(dtype) < kWidenedMinBytesAmongMany) return false;
  return run_widened(ctx, count * dtype_size(dtype), [&](GroupShm& shm, const OpRef& ref) {
    return shm.start_large_all_reduce(ref, in, out, count, dtype, op);
  });
}

std::unique_ptr<InFlight> post_barrier(std::unique_ptr<OpContext> ctx) {
  const OpRef ref = op_of(*ctx);
  std::shared_ptr<GroupShm> shm = shm_of(*ctx, ref);
  ctx->ran(Collective::Barrier, Algorithm::SharedMemory);
  const uint32_t n = shm->start_barrier(ref);
  return std::make_unique<ShmInFlight>(std::move(shm), n, std::move(ctx), ref);
}

void barrier(OpContext& ctx) {
  const OpRef ref = op_of(ctx);
  std::shared_ptr<GroupShm> shm = shm_of(ctx, ref);
  run_to_the_end(*shm, shm->start_barrier(ref), ctx, ref);
}

std::unique_ptr<InFlight> post_all_to_all(std::unique_ptr<OpContext>& ctx,
                                          std::unique_ptr<AllToAllBlocks>& blocks,
                                          const char* name, bool let_peers_write) {
  const OpRef ref = op_of(*ctx);
  std::shared_ptr<GroupShm> shm = shm_of(*ctx, ref);
  if (!single_copy_fits(*shm, blocks->parts(), ref)) return nullptr;
  ctx->ran(Collective::AllToAll, Algorithm::SharedMemory);
  bool accepted = false;
  const uint32_t n =
      shm->start_all_to_all(ref, *blocks, name, let_peers_write ? &accepted : nullptr);
  auto started = std::make_unique<ShmInFlight>(std::move(shm), n, std::move(ctx), ref,
                                               std::move(blocks));
  if (accepted) started->keep_buffers_on_failure();
  return started;
}

bool all_to_all(OpContext& ctx, const AllToAllBlocks& blocks, const char* name) {
  const OpRef ref = op_of(ctx);
  std::shared_ptr<GroupShm> shm = shm_of(ctx, ref);
  if (!single_copy_fits(*shm, blocks.parts(), ref)) return false;
  ctx.ran(Collective::AllToAll, Algorithm::SharedMemory);
  run_to_the_end(*shm, shm->start_all_to_all(ref, blocks, name), ctx, ref);
  return true;
}

std::unique_ptr<InFlight> post_gather(std::unique_ptr<OpContext> ctx,
                                      std::unique_ptr<GatherBlocks> blocks, Collective c) {
  const OpRef ref = op_of(*ctx);
  std::shared_ptr<GroupShm> shm = shm_of(*ctx, ref);
  ctx->ran(c, Algorithm::SharedMemory);
  PeerWrites writes;
  const uint32_t n = start_any_gather(*shm, *ctx, ref, *blocks, &writes);
  auto started =
      std::make_unique<ShmInFlight>(std::move(shm), n, std::move(ctx), ref, std::move(blocks));
  if (writes.accepted) started->keep_buffers_on_failure();
  return started;
}

void gather(OpContext& ctx, const GatherBlocks& blocks, Collective c) {
  const OpRef ref = op_of(ctx);
  std::shared_ptr<GroupShm> shm = shm_of(ctx, ref);
  ctx.ran(c, Algorithm::SharedMemory);
  run_to_the_end(*shm, start_any_gather(*shm, ctx, ref, blocks), ctx, ref);
}

namespace {

// Both forms of reduce_scatter: one buffer `in`, or the list form's `blocks`.
std::unique_ptr<InFlight> post_any_reduce_scatter(std::unique_ptr<OpContext> ctx, const void* in,
                                                  std::span<const InputPiece> blocks, void* out,
                                                  size_t first, size_t count, size_t total,
                                                  DType dtype, ReduceOp op) {
  const OpRef ref = op_of(*ctx);
  std::shared_ptr<GroupShm> shm = shm_of(*ctx, ref);
  ctx->ran(Collective::ReduceScatter, Algorithm::SharedMemory);
  const uint32_t n =
      start_any_reduce_scatter(*shm, *ctx, ref, in, blocks, out, first, count, total, dtype, op);
  return std::make_unique<ShmInFlight>(std::move(shm), n, std::move(ctx), ref);
}

void run_any_reduce_scatter(OpContext& ctx, const void* in, std::span<const InputPiece> blocks,
                            void* out, size_t first, size_t count, size_t total, DType dtype,
                            ReduceOp op) {
  const OpRef ref = op_of(ctx);
  std::shared_ptr<GroupShm> shm = shm_of(ctx, ref);
  ctx.ran(Collective::ReduceScatter, Algorithm::SharedMemory);
  run_to_the_end(*shm,
                 start_any_reduce_scatter(*shm, ctx, ref, in, blocks, out, first, count, total,
                                          dtype, op),
                 ctx, ref);
}

}  // namespace

std::unique_ptr<InFlight> post_reduce_scatter(std::unique_ptr<OpContext> ctx, const void* in,
                                              void* out, size_t first, size_t count,
                                              size_t total, DType dtype, ReduceOp op) {
  return post_any_reduce_scatter(std::move(ctx), in, {}, out, first, count, total, dtype, op);
}

void reduce_scatter(OpContext& ctx, const void* in, void* out, size_t first, size_t count,
                    size_t total, DType dtype, ReduceOp op) {
  run_any_reduce_scatter(ctx, in, {}, out, first, count, total, dtype, op);
}

bool reduce_scatter_widened(OpContext& ctx, const void* in, void* out, size_t first,
                            size_t count, size_t total, DType dtype, ReduceOp op) {
  return run_widened(ctx, total * dtype_size(dtype), [&](GroupShm& shm, const OpRef& ref) {
    ctx.ran(Collective::ReduceScatter, Algorithm::SharedMemory);
    return shm.start_reduce_scatter(ref, in, out, first, count, dtype, op);
  });
}

bool listed_reduce_scatter_fits(int ranks) {
  return static_cast<size_t>(ranks) <= GroupShm::max_listed_blocks();
}

std::unique_ptr<InFlight> post_reduce_scatter(std::unique_ptr<OpContext> ctx,
                                              std::span<const InputPiece> blocks, void* out,
                                              size_t first, size_t count, size_t total,
                                              DType dtype, ReduceOp op) {
  return post_any_reduce_scatter(std::move(ctx), nullptr, blocks, out, first, count, total,
                                 dtype, op);
}

void reduce_scatter(OpContext& ctx, std::span<const InputPiece> blocks, void* out, size_t first,
                    size_t count, size_t total, DType dtype, ReduceOp op) {
  run_any_reduce_scatter(ctx, nullptr, blocks, out, first, count, total, dtype, op);
}

std::unique_ptr<InFlight> post_reduce(std::unique_ptr<OpContext> ctx, const void* in, void* out,
                                      size_t count, int root, DType dtype, ReduceOp op) {
  const OpRef ref = op_of(*ctx);
  std::shared_ptr<GroupShm> shm = shm_of(*ctx, ref);
  ctx->ran(Collective::Reduce, Algorithm::SharedMemory);
  PeerWrites writes;
  const uint32_t n = start_any_reduce(*shm, *ctx, ref, in, out, count, root, dtype, op, &writes);
  auto started = std::make_unique<ShmInFlight>(std::move(shm), n, std::move(ctx), ref);
  if (writes.accepted) started->keep_buffers_on_failure();
  return started;
}

void reduce(OpContext& ctx, const void* in, void* out, size_t count, int root, DType dtype,
            ReduceOp op) {
  const OpRef ref = op_of(ctx);
  std::shared_ptr<GroupShm> shm = shm_of(ctx, ref);
  run_to_the_end(*shm, start_any_reduce(*shm, ctx, ref, in, out, count, root, dtype, op), ctx,
                 ref);
}

}  // namespace ferry::detail::shm
