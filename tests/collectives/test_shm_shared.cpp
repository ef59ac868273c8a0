// The shared-memory path on tensors in shared memory (empty_shared, share_memory_): a peer's
// buffer that lies in its shared arena is read straight out of a mapping of it
// (collectives/shm/peer_arenas.h), with no system call, and must give the bytes the
// point-to-point algorithms give, for every dtype and reduction, in place and out of place, with
// uneven slices; the process's counters of bytes moved by each way show which ran. Where only
// some ranks' buffers are shared, each rank reads those by mapping and the others through the
// kernel (an all_gather's ranks write their blocks into the shared outputs), with the same
// result. Calls that differ write nothing into a peer's shared output. Once the group is gone
// no peer's arena stays mapped. As
// test_shm.cpp: only where the group's ranks share a host (the mpiexec and UCX suites).
#include "checks.h"
#include "shm_checks.h"
#include "spmd_case.h"

#include <ferry/collectives/engine/group_impl.h>
#include <ferry/collectives/engine/reduce_kernels.h>
#include <ferry/collectives/shm/peer_arenas.h>
#include <ferry/runtime/shared_arena.h>

#include <catch2/catch.hpp>

#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

using namespace ftest;

namespace {

using ferry::Algorithm;
using ferry::Collective;
using ferry::detail::shm::single_copy_bytes;
using ferry::detail::shm::SingleCopyBytes;

// Elements per rank: above the slots (for 16-bit elements, above 128 KiB, where an all_reduce
// among more than 2 ranks widens in the cache), not a multiple of any group size, so slices
// are uneven.
constexpr int64_t kCount = 70001;

// A copy of `t`, in shared memory when `shared`.
Tensor placed(const Tensor& t, bool shared) {
  Tensor s =
      shared ? ferry::empty_shared(t.shape(), t.dtype()) : ferry::empty(t.shape(), t.dtype());
  s.copy_(t);
  return s;
}

// How a collective's ranks move bytes between processes: each reads its peers' buffers
// (Pull); a gather's ranks write their blocks into the peers' outputs that are shared and read
// the other blocks (Push), as an all_to_all's do, each of which sends a block (Exchange); a
// broadcast from rank 0 is a gather in which only the root has a
// block (Root); a reduce's ranks read their slices of every input, and the root reads the
// others' finished slices from memory their ops hold, unless they wrote them into its output
// (ToRoot).
enum class Moves { Pull, Push, Exchange, Root, ToRoot };

// What one collective is run on: its input, and a fresh output of `out_count` elements (none:
// in place), both shared or not.
struct Call {
  const char* name;    // for messages and --algo
  const char* form;    // for messages
  const char* other;   // the point-to-point algorithm it is compared with
  Collective c;
  int64_t out_count;   // 0: in place
  Moves moves;
  std::function<void(const Tensor& in, Tensor& out, const Group& g, ReduceOp op)> run;
};

std::vector<Call> calls(int W) {
  return {
      {"all_reduce", "out of place", "direct", Collective::AllReduce, kCount, Moves::Pull,
       [](const Tensor& in, Tensor& out, const Group& g, ReduceOp op) {
         ferry::all_reduce(in, out, g, op).wait();
       }},
      {"all_reduce", "in place", "direct", Collective::AllReduce, 0, Moves::Pull,
       [](const Tensor&, Tensor& out, const Group& g, ReduceOp op) {
         ferry::all_reduce(out, g, op).wait();
       }},
      {"reduce_scatter", "out of place", "ring", Collective::ReduceScatter, kCount / W, Moves::Pull,
       [](const Tensor& in, Tensor& out, const Group& g, ReduceOp op) {
         ferry::reduce_scatter(in.narrow(0, 0, out.numel() * g.size()), out, g, op).wait();
       }},
      {"all_gather", "out of place", "ring", Collective::AllGather, kCount * W, Moves::Push,
       [](const Tensor& in, Tensor& out, const Group& g, ReduceOp) {
         ferry::all_gather(in, out, g).wait();
       }},
      // In place: the input is this rank's block of the output.
      {"all_gather", "in place", "ring", Collective::AllGather, kCount * W, Moves::Push,
       [](const Tensor& in, Tensor& out, const Group& g, ReduceOp) {
         Tensor own = out.narrow(0, g.rank() * in.numel(), in.numel());
         own.copy_(in);
         ferry::all_gather(own, out, g).wait();
       }},
      {"broadcast", "from rank 0", "tree", Collective::Broadcast, 0, Moves::Root,
       [](const Tensor&, Tensor& out, const Group& g, ReduceOp) {
         ferry::broadcast(out, 0, g).wait();
       }},
      // The others' slices reduced into memory the op holds, which the root reads, or which
      // they write into the root's output when it is shared.
      {"reduce", "to rank 0", "tree", Collective::Reduce, kCount, Moves::ToRoot,
       [](const Tensor& in, Tensor& out, const Group& g, ReduceOp op) {
         ferry::reduce(in, g.rank() == 0 ? out : Tensor(), 0, g, op).wait();
       }},
      {"all_to_all", "single", "pairwise", Collective::AllToAll, kCount / W * W, Moves::Exchange,
       [](const Tensor& in, Tensor& out, const Group& g, ReduceOp) {
         ferry::all_to_all_single(in.narrow(0, 0, out.numel()), out, g).wait();
       }},
  };
}

// Whether a way must be taken (Yes), must not (No), or may be (Either).
enum class Want { No, Yes, Either };

bool meets(Want want, bool taken) { return want == Want::Either || taken == (want == Want::Yes); }

const char* describe(Want w) { return w == Want::Yes ? "yes" : w == Want::No ? "no" : "either"; }
Want want(bool yes) { return yes ? Want::Yes : Want::No; }

// Whether rank `me` of `W` moves bytes to or from its peers by mapping (first) and reads
// through the kernel (second), every rank's buffers shared or only rank 0's. A rank accepts
// writes into its output only when its op started at issue, which an op queued behind the
// one before it did not (timing): whether a peer wrote its block or the rank read it is
// known only where no shared output could take the write.
std::pair<Want, Want> expected_ways(Moves moves, int me, int W, bool only_rank_0) {
  switch (moves) {
    case Moves::Pull:
      return {want(!only_rank_0 || me != 0), want(only_rank_0 && (me == 0 || W > 2))};
    case Moves::Exchange:
      // Every output shared: each rank moves its own block to every peer by mapping at least.
      if (!only_rank_0) return {Want::Yes, Want::No};
      [[fallthrough]];
    case Moves::Push:
      // Every output shared: each block moves by mapping, written or read, though a rank whose
      // peers all wrote to it while none accepted its own block moves nothing itself.
      if (!only_rank_0) return {Want::Either, Want::No};
      // Rank 0's peers write to it or it reads theirs; they read its block and each other's.
      if (me == 0) return {Want::No, Want::Either};
      return {Want::Yes, want(W > 2)};
    case Moves::ToRoot:
      if (me == 0) return {want(!only_rank_0), only_rank_0 ? Want::Yes : Want::Either};
      return {Want::Yes, want(only_rank_0 && W > 2)};
    case Moves::Root:
      // Every output shared: the root writes to those that accept, they read the rest.
      if (!only_rank_0) return {Want::Either, Want::No};
      return {want(me != 0), Want::No};  // nobody accepts: the others read the root's
  }
  return {Want::No, Want::No};
}

// Runs `call` forced to `algo` on `in` (shared or not) into a fresh output placed alike.
Tensor run(const Call& call, const Group& g, const Tensor& in, ReduceOp op, bool shared,
           const char* algo) {
  ScopedAlgorithm o(std::string(call.name) + ":" + algo);
  Tensor input = placed(in, shared);
  if (call.out_count == 0) {
    call.run(input, input, g, op);
    return snapshot(input);
  }
  Tensor out = placed(ferry::zeros({call.out_count}, in.dtype()), shared);
  call.run(input, out, g, op);
  return snapshot(out);
}

bool is_reduction(Collective c) {
  return c == Collective::AllReduce || c == Collective::ReduceScatter ||
         c == Collective::Reduce;
}

// Every rank's buffers shared, or only rank 0's: shm equals `other`, and
// the counters show each peer's buffer read the way its placement allows.
void shared_matches_other(Group& world, Ctx& ctx, bool only_rank_0) {
  Group g = world.split(0, world.rank());
  const int W = g.size(), me = g.rank();
  const bool mine_shared = !only_rank_0 || me == 0;
  for (const Call& call : calls(W)) {
    const auto [by_mapping, by_kernel_wanted] = expected_ways(call.moves, me, W, only_rank_0);
    for (DType dt : shm_dtypes()) {
      const std::vector<ReduceOp> ops =
          is_reduction(call.c) ? ops_for(dt) : std::vector<ReduceOp>{ReduceOp::Sum};
      for (ReduceOp op : ops) {
        Gen gen(pattern_for(op), dt, me, 7);
        const Tensor in = make_tensor(gen, {kCount}, dt);
        const uint64_t ran = runs(g, call.c, Algorithm::SharedMemory);
        const SingleCopyBytes before = single_copy_bytes();
        Tensor by_shm = run(call, g, in, op, mine_shared, "shm");
        const SingleCopyBytes after = single_copy_bytes();
        Tensor by_other = run(call, g, in, op, false, call.other);
        const std::string w = where(g, call.name) + " " + call.form + " " +
                              ferry::dtype_name(dt) + " " + ferry::reduce_op_name(op);
        expect_as_other(ctx, g, w, call.c, ran, by_shm, by_other, call.other);
        // A 16-bit reduce runs on float32 copies in the group's scratch, shared whatever the
        // caller's tensors (private_16_bit_moves; all_reduce and reduce_scatter read the
        // caller's); a reduce's average runs on the worker, on slices read through the kernel.
        if (call.c == Collective::Reduce && ferry::detail::accumulation_dtype(dt) != dt) continue;
        if (call.c == Collective::Reduce && op == ReduceOp::Avg) continue;
        const bool mapped = after.mapped + after.written > before.mapped + before.written;
        const bool by_kernel = after.by_kernel > before.by_kernel;
        // The bindings are captured by name: clang before 16 cannot capture them.
        ctx.expect(meets(by_mapping, mapped) && meets(by_kernel_wanted, by_kernel),
                   [&, by_mapping = by_mapping, by_kernel_wanted = by_kernel_wanted] {
          return w + ": expected bytes by mapping " + describe(by_mapping) +
                 ", through the kernel " + describe(by_kernel_wanted) + "; given " +
                 std::to_string(after.mapped - before.mapped) + " B read and " +
                 std::to_string(after.written - before.written) + " B written by mapping, " +
                 std::to_string(after.by_kernel - before.by_kernel) + " B through the kernel";
        });
      }
    }
  }
}

void all_shared(Group& world, Ctx& ctx) { shared_matches_other(world, ctx, false); }
void rank_0_shared(Group& world, Ctx& ctx) { shared_matches_other(world, ctx, true); }

// A 16-bit all_reduce or reduce_scatter widens a chunk at a time in the cache: it reads the
// peers' private 16-bit tensors through the kernel, exactly its block of each peer's input (and
// for the all_reduce the other ranks' finished slices), and nothing by mapping; the result is
// the point-to-point algorithm's. Among more than 2 ranks an all_reduce below 128 KiB widens
// into float32 copies in shared memory instead, which it reads by mapping.
void private_16_bit_moves(Group& world, Ctx& ctx) {
  Group g = world.split(0, world.rank());
  for (const Call& call : calls(g.size())) {
    if (call.c != Collective::AllReduce && call.c != Collective::ReduceScatter) continue;
    const int W = g.size(), me = g.rank();
    for (DType dt : {DType::Float16, DType::BFloat16}) {
      for (ReduceOp op : ops_for(dt)) {
        Gen gen(pattern_for(op), dt, g.rank(), 11);
        const Tensor in = make_tensor(gen, {kCount}, dt);
        const uint64_t ran = runs(g, call.c, Algorithm::SharedMemory);
        const SingleCopyBytes before = single_copy_bytes();
        Tensor by_shm = run(call, g, in, op, /*shared=*/false, "shm");
        const SingleCopyBytes after = single_copy_bytes();
        Tensor by_other = run(call, g, in, op, false, call.other);
        const std::string w = where(g, call.name) + " " + call.form + " " +
                              ferry::dtype_name(dt) + " " + ferry::reduce_op_name(op);
        expect_as_other(ctx, g, w, call.c, ran, by_shm, by_other, call.other);
        // This rank's block: the all_reduce's slice of kCount, the reduce_scatter's output.
        const uint64_t block = call.c == Collective::AllReduce
                                   ? (kCount * (me + 1) / W - kCount * me / W) * 2
                                   : static_cast<uint64_t>(kCount / W) * 2;
        const uint64_t want = (W - 1) * block + (call.c == Collective::AllReduce
                                                     ? kCount * 2 - block
                                                     : 0);
        ctx.expect(after.mapped == before.mapped && after.by_kernel - before.by_kernel == want,
                   [&] {
                     return w + ": expected " + std::to_string(want) +
                            " B of 16-bit blocks through the kernel, given " +
                            std::to_string(after.mapped - before.mapped) + " B by mapping and " +
                            std::to_string(after.by_kernel - before.by_kernel) +
                            " B through the kernel";
                   });
        if (call.c != Collective::AllReduce || W <= 2) continue;
        // Among more than 2 ranks, below 128 KiB (60 KB): float32 copies read by mapping.
        constexpr int64_t kSmall = 30001;
        Call small_call = call;
        if (call.out_count != 0) small_call.out_count = kSmall;
        const Tensor small = make_tensor(gen, {kSmall}, dt);
        const SingleCopyBytes small_before = single_copy_bytes();
        Tensor small_shm = run(small_call, g, small, op, /*shared=*/false, "shm");
        const SingleCopyBytes small_after = single_copy_bytes();
        Tensor small_other = run(small_call, g, small, op, false, call.other);
        ctx.expect(same_bytes(small_shm, small_other), [&] { return w + ": small: shm differs"; });
        ctx.expect(small_after.by_kernel == small_before.by_kernel &&
                       small_after.mapped > small_before.mapped,
                   [&] {
                     return w + ": small: expected float32 copies read by mapping, given " +
                            std::to_string(small_after.mapped - small_before.mapped) +
                            " B by mapping and " +
                            std::to_string(small_after.by_kernel - small_before.by_kernel) +
                            " B through the kernel";
                   });
      }
    }
  }
}

// The mappings of peers' arenas in this process ("/memfd:ferry-arena-<pid>-<n>", pid not ours).
int peer_arena_mappings() {
  std::ifstream maps("/proc/self/maps");
  const std::string mine = "ferry-arena-" + std::to_string(getpid()) + "-";
  int n = 0;
  for (std::string line; std::getline(maps, line);)
    if (line.find("ferry-arena-") != std::string::npos && line.find(mine) == std::string::npos)
      ++n;
  return n;
}

// Several large shared all_reduces in flight, waited for in reverse; then, the group gone, no
// peer's arena is mapped any more.
void in_flight_then_unmapped(Group& world, Ctx& ctx) {
  const int before = peer_arena_mappings();
  {
    Group g = world.split(0, world.rank());
    const int W = g.size();
    ScopedAlgorithm o("all_reduce:shm");
    std::vector<Tensor> ts;
    std::vector<Work> works;
    for (int k = 0; k < 6; ++k) {
      ts.push_back(ferry::empty_shared({kCount}));
      ts.back().fill_(static_cast<double>(k + g.rank()));
      works.push_back(ferry::all_reduce(ts.back(), g));
    }
    for (int k = 5; k >= 0; --k) works[k].wait();
    for (int k = 0; k < 6; ++k) {
      const double want = W * k + W * (W - 1) / 2.0;
      ctx.expect(ts[k].get_flat(0) == want && ts[k].get_flat(kCount - 1) == want,
                 [&] { return where(g, "shared in flight " + std::to_string(k)) + ": wrong sum"; });
    }
    ctx.expect(peer_arena_mappings() > before,
               [&] { return where(g, "maps") + ": no peer arena mapped while the group lives"; });
  }
  ctx.expect(peer_arena_mappings() == before, [&] {
    return "rank " + std::to_string(world.rank()) + ": " +
           std::to_string(peer_arena_mappings() - before) +
           " peer arena mapping(s) left after the group ended";
  });
}

// On a group whose every op so far started at issue (so every rank's op does, and accepts
// writes): an all_reduce's rank reads its slice of every peer's input and writes the finished
// slice into every peer's output, reading nothing else; each rank of an all_gather writes its
// block into every peer's output and reads nothing; a broadcast's root writes, the others move
// nothing.
void writes_into_peers(Group& world, Ctx& ctx) {
  Group g = world.split(0, world.rank());
  const int W = g.size(), me = g.rank();
  ScopedAlgorithm o("all_gather:shm,broadcast:shm,barrier:shm");
  Tensor in = ferry::empty_shared({kCount});
  in.fill_(me + 1);
  Tensor out = ferry::empty_shared({kCount * W});
  out.fill_(-1);
  Tensor cast = ferry::empty_shared({kCount});
  cast.fill_(me == 0 ? 9.0 : -1.0);
  ferry::barrier(g).wait();
  {
    ScopedAlgorithm shm("all_reduce:shm");
    Tensor sum = ferry::empty_shared({kCount});
    const SingleCopyBytes start = single_copy_bytes();
    ferry::all_reduce(in, sum, g).wait();
    const SingleCopyBytes end = single_copy_bytes();
    const uint64_t slice = (kCount * (me + 1) / W - kCount * me / W) * sizeof(float);
    const uint64_t peers = static_cast<uint64_t>(W - 1);
    ctx.expect(sum.get_flat(0) == W * (W + 1) / 2 && sum.get_flat(kCount - 1) == W * (W + 1) / 2,
               [&] { return where(g, "written all_reduce") + ": wrong sum"; });
    ctx.expect(end.written - start.written == peers * slice &&
                   end.mapped - start.mapped == peers * slice && end.by_kernel == start.by_kernel,
               [&] {
                 return where(g, "all_reduce") + ": expected " + std::to_string(peers * slice) +
                        " B read and as many written by mapping, given " +
                        std::to_string(end.mapped - start.mapped) + " B read, " +
                        std::to_string(end.written - start.written) + " B written, " +
                        std::to_string(end.by_kernel - start.by_kernel) + " B by the kernel";
               });
  }
  const SingleCopyBytes before = single_copy_bytes();
  ferry::all_gather(in, out, g).wait();
  const SingleCopyBytes between = single_copy_bytes();
  ferry::broadcast(cast, 0, g).wait();
  const SingleCopyBytes after = single_copy_bytes();
  bool right = cast.get_flat(kCount - 1) == 9.0;
  for (int r = 0; r < W; ++r)
    right = right && out.get_flat(r * kCount) == r + 1 &&
            out.get_flat(r * kCount + kCount - 1) == r + 1;
  ctx.expect(right, [&] { return where(g, "written gathers") + ": wrong values"; });
  const uint64_t block = kCount * sizeof(float), peers = static_cast<uint64_t>(W - 1);
  auto moved = [](const SingleCopyBytes& a, const SingleCopyBytes& b) {
    return std::to_string(b.written - a.written) + " B written, " +
           std::to_string(b.mapped - a.mapped) + " B read by mapping, " +
           std::to_string(b.by_kernel - a.by_kernel) + " B through the kernel";
  };
  ctx.expect(between.written - before.written == peers * block &&
                 between.mapped == before.mapped && between.by_kernel == before.by_kernel,
             [&] { return where(g, "all_gather") + ": expected " + std::to_string(peers * block) +
                          " B written and nothing read, given " + moved(before, between); });
  const uint64_t root_writes = me == 0 ? peers * block : 0;
  ctx.expect(after.written - between.written == root_writes && after.mapped == between.mapped &&
                 after.by_kernel == between.by_kernel,
             [&] { return where(g, "broadcast") + ": expected " + std::to_string(root_writes) +
                          " B written and nothing read, given " + moved(between, after); });
}

// Gathers into shared outputs whose calls differ across ranks (split sizes, roots): every rank
// raises MismatchError, and no peer wrote into an output that accepts writes.
void mismatch_writes_nothing(Group& world, Ctx& ctx) {
  const int W = world.size(), me = world.rank();
  const bool odd = me % 2 == 1;
  ScopedAlgorithm o("all_gather:shm,broadcast:shm");
  std::vector<int64_t> sizes(static_cast<size_t>(W), 2);
  if (odd) {
    sizes[0] = 1;
    sizes[1] = 3;
  }
  Tensor in = ferry::full({sizes[static_cast<size_t>(me)], 8192}, 1.0);
  Tensor out = ferry::empty_shared({2 * W, 8192});
  out.fill_(-7);
  expect_mismatch(world, ctx, "shared all_gather_v split 2,2,... vs 1,3,...",
                  [&](Group& g) { ferry::all_gather_v(in, out, sizes, g).wait(); }, out);
  const int root = odd ? 1 : 0;
  Tensor t = ferry::empty_shared({100000});
  t.fill_(me == root ? 5.0 : -7.0);
  expect_mismatch(world, ctx, "shared broadcast from root 0 vs 1",
                  [&](Group& g) { ferry::broadcast(t, root, g).wait(); },
                  me == root ? Tensor() : t);
}

// A large all_gather_v into outputs in shared memory, with uneven rows (so uneven offsets),
// ranks of no rows, out of place and in place (each rank's input its rows of the output):
// the ring's bytes.
void shared_all_gather_v(Group& world, Ctx& ctx) {
  Group g = world.split(0, world.rank());
  const int W = g.size(), me = g.rank();
  constexpr int64_t kInner = 3001;  // a row of 12004 B: two rows are above a slot
  std::vector<int64_t> sizes(static_cast<size_t>(W));
  for (int r = 0; r < W; ++r) sizes[static_cast<size_t>(r)] = r % 3 == 1 ? 0 : 2 + r % 3;
  int64_t total = 0, first = 0;
  for (int r = 0; r < W; ++r) {
    if (r == me) first = total;
    total += sizes[static_cast<size_t>(r)];
  }
  const int64_t mine = sizes[static_cast<size_t>(me)];
  Gen gen(pattern_for(ReduceOp::Sum), DType::Float32, me, 11);
  const Tensor in = make_tensor(gen, {mine, kInner}, DType::Float32);
  for (bool in_place : {false, true}) {
    auto run = [&](const char* algo, bool shared) {
      ScopedAlgorithm o(std::string("all_gather:") + algo);
      Tensor out = placed(ferry::zeros({total, kInner}), shared);
      Tensor own = in_place ? out.narrow(0, first, mine) : placed(in, shared);
      if (in_place) own.copy_(in);
      ferry::all_gather_v(own, out, sizes, g).wait();
      return snapshot(out);
    };
    const uint64_t ran = runs(g, Collective::AllGather, Algorithm::SharedMemory);
    Tensor by_shm = run("shm", true);
    Tensor by_ring = run("ring", false);
    expect_as_other(ctx, g, where(g, in_place ? "shared all_gather_v in place"
                                              : "shared all_gather_v out of place"),
                    Collective::AllGather, ran, by_shm, by_ring, "ring");
  }
}

// The bytes per rank of the gathers below: above the slots.
constexpr int64_t kGathered = 20000;

// Whether every block of an all_gather of ranks' `base + rank` landed.
bool gathered_right(const Tensor& out, int W, double base) {
  bool ok = true;
  for (int r = 0; r < W; ++r)
    ok = ok && out.get_flat(r * kGathered) == base + r &&
         out.get_flat(r * kGathered + kGathered - 1) == base + r;
  return ok;
}

// A large gather takes two op numbers and notes in the second's buffer which peers it wrote
// its block to; the buffers come round every two gathers. A gather into shared outputs (its
// ranks write to each other, noting it), then two into outputs that are not shared: the
// third's notes lie where the first's did, and must not make a rank skip a block nobody wrote.
void written_notes_do_not_outlive_their_gather(Group& world, Ctx& ctx) {
  Group g = world.split(0, world.rank());
  const int W = g.size(), me = g.rank();
  ScopedAlgorithm o("all_gather:shm,barrier:shm");
  ferry::barrier(g).wait();  // nothing in flight: the next gathers start at issue
  Tensor in = ferry::empty_shared({kGathered});
  in.fill_(me);
  Tensor out = ferry::empty_shared({kGathered * W});
  const SingleCopyBytes before = single_copy_bytes();
  ferry::all_gather(in, out, g).wait();
  ctx.expect(single_copy_bytes().written > before.written && gathered_right(out, W, 0),
             [&] { return where(g, "shared all_gather") + ": no block written, or wrong"; });
  for (int k = 1; k <= 2; ++k) {
    Tensor plain_in = ferry::full({kGathered}, 100.0 * k + me);
    Tensor plain_out = ferry::zeros({kGathered * W});
    ferry::all_gather(plain_in, plain_out, g).wait();
    ctx.expect(gathered_right(plain_out, W, 100.0 * k), [&] {
      return where(g, "unshared all_gather " + std::to_string(k) +
                          " after a shared one") + ": a block is missing";
    });
  }
}

// A broadcast from the last rank, every rank's tensor shared: the root writes into the others.
void shared_broadcast_from_last(Group& world, Ctx& ctx) {
  Group g = world.split(0, world.rank());
  const int W = g.size(), me = g.rank(), root = W - 1;
  ScopedAlgorithm o("broadcast:shm,barrier:shm");
  ferry::barrier(g).wait();
  Gen gen(pattern_for(ReduceOp::Sum), DType::Float64, root, 5);
  const Tensor values = make_tensor(gen, {kGathered}, DType::Float64);
  Tensor t = placed(me == root ? values : ferry::zeros({kGathered}, DType::Float64), true);
  const SingleCopyBytes before = single_copy_bytes();
  ferry::broadcast(t, root, g).wait();
  const SingleCopyBytes after = single_copy_bytes();
  ctx.expect(same_bytes(snapshot(t), values),
             [&] { return where(g, "shared broadcast from the last rank") + ": wrong bytes"; });
  ctx.expect(me != root || after.written > before.written, [&] {
    return where(g, "shared broadcast from the last rank") + ": the root wrote nothing";
  });
}

// A broadcast's root receives nothing, so it accepts no writes into its tensor: when the op
// fails (sizes that differ), its tensor is not kept for the life of the process and goes back
// to the arena once dropped.
void failed_root_keeps_nothing(Group& world, Ctx& ctx) {
  Group g = world.split(0, world.rank());
  const int me = g.rank();
  ScopedAlgorithm o("broadcast:shm,barrier:shm");
  ferry::barrier(g).wait();  // nothing in flight: the broadcast starts at issue
  const size_t in_use = ferry::detail::shared_bytes_in_use();
  std::string kind = "none";
  {
    Tensor t = ferry::empty_shared({me == 0 ? 100000 : 100256});
    t.fill_(me == 0 ? 5.0 : -7.0);
    try {
      ferry::broadcast(t, 0, g).wait();
    } catch (const std::exception& e) {
      kind = error_kind(e);
    }
  }
  // The root raises MismatchError; a peer that learns the root's failure first may raise that.
  ctx.expect(me == 0 ? kind == "MismatchError" : kind != "none",
             [&] { return where(g, "broadcast of differing sizes") + ": raised " + kind; });
  ctx.expect(me != 0 || ferry::detail::shared_bytes_in_use() == in_use, [&] {
    return where(g, "failed broadcast's root") + ": its shared tensor was kept (" +
           std::to_string(ferry::detail::shared_bytes_in_use() - in_use) + " B)";
  });
}

// A peer's chunk this rank could not map for want of descriptors (EMFILE: rank 1's limit
// lowered to its lowest free one for one op) is read through the kernel then, and mapped at
// the next op: a refusal that may pass is not kept for the group's life.
void refusal_for_now_tried_again(Group& world, Ctx& ctx) {
  Group g = world.split(0, world.rank());
  const int W = g.size(), me = g.rank();
  ScopedAlgorithm o("all_reduce:shm");
  Tensor in = ferry::empty_shared({kCount});
  in.fill_(me + 1);
  Tensor out = ferry::empty_shared({kCount});
  rlimit old{};
  getrlimit(RLIMIT_NOFILE, &old);
  if (me == 1) {
    const int lowest = open("/dev/null", O_RDONLY | O_CLOEXEC);
    close(lowest);
    rlimit low = old;
    low.rlim_cur = static_cast<rlim_t>(lowest);
    setrlimit(RLIMIT_NOFILE, &low);
  }
  const SingleCopyBytes a = single_copy_bytes();
  ferry::all_reduce(in, out, g).wait();
  if (me == 1) setrlimit(RLIMIT_NOFILE, &old);
  const SingleCopyBytes b = single_copy_bytes();
  const double want = W * (W + 1) / 2.0;
  const bool first_right = out.get_flat(0) == want && out.get_flat(kCount - 1) == want;
  out.fill_(0);
  ferry::all_reduce(in, out, g).wait();
  const SingleCopyBytes c = single_copy_bytes();
  ctx.expect(first_right && out.get_flat(0) == want && out.get_flat(kCount - 1) == want,
             [&] { return where(g, "all_reduce with descriptors short") + ": wrong sums"; });
  if (me != 1) return;
  ctx.expect(b.mapped + b.written == a.mapped + a.written && b.by_kernel > a.by_kernel, [&] {
    return where(g, "out of descriptors") + ": expected every read through the kernel, given " +
           std::to_string(b.mapped - a.mapped) + " B read by mapping, " +
           std::to_string(b.by_kernel - a.by_kernel) + " B through the kernel";
  });
  ctx.expect(c.mapped > b.mapped, [&] {
    return where(g, "descriptors back") + ": the peers' chunks are still not mapped";
  });
}

bool add(const char* name, void (*body)(Group&, Ctx&)) {
  return register_spmd_case(name, "[shm]", body, not_one_host);
}

[[maybe_unused]] const bool registered =
    add("shm: shared tensors are read by mapping, equal to the point-to-point algorithms",
        all_shared) &&
    add("shm: only rank 0's tensors shared: mapped from it, through the kernel from the others",
        rank_0_shared) &&
    add("shm: 16-bit all_reduce and reduce_scatter read private 16-bit blocks, widening in the "
        "cache",
        private_16_bit_moves) &&
    add("shm: shared tensors in flight, and no peer arena mapped once the group is gone",
        in_flight_then_unmapped) &&
    add("shm: large ops into shared outputs write into the peers' outputs", writes_into_peers) &&
    add("shm: shared gathers whose calls differ raise MismatchError, nothing written",
        mismatch_writes_nothing) &&
    add("shm: large all_gather_v into shared outputs, empty ranks, in place",
        shared_all_gather_v) &&
    add("shm: a gather's notes of the peers it wrote to do not reach a later gather",
        written_notes_do_not_outlive_their_gather) &&
    add("shm: shared broadcast from the last rank", shared_broadcast_from_last) &&
    add("shm: a failed broadcast's root keeps no shared tensor", failed_root_keeps_nothing) &&
    add("shm: a peer chunk not mapped for want of descriptors is mapped at a later op",
        refusal_for_now_tried_again);

}  // namespace
