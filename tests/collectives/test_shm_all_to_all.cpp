// Where the shared-memory all_to_all's bytes go (collectives/shm/shm_all_to_all.cpp), counted
// by detail::shm::single_copy_bytes on the rank that moves them:
//  - a rank whose blocks for its peers all fit its slot copies them there, and each peer copies
//    its block out of the slot (`in_slot` on the reader), whatever the other ranks do;
//  - larger contiguous blocks in private memory are read where they lie, through the kernel;
//  - larger private blocks of a laid-out all-to-all (any scattered block) are copied once into
//    the sender's shared arena (`staged` on the sender) and read from there by mapping;
//  - blocks already in shared memory are read by mapping, never staged.
// Each result is compared with the pairwise exchange's. The counters are per process: these
// cases run under mpiexec and the UCX launcher (one process per rank), on one host.
#include "checks.h"
#include "shm_checks.h"
#include "spmd_case.h"

#include <ferry/collectives/engine/group_impl.h>
#include <ferry/collectives/shm/peer_arenas.h>

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace ftest;

namespace {

using ferry::Algorithm;
using ferry::BlockLayout;
using ferry::StridedRun;
using ferry::Work;
using ferry::Collective;
using ferry::detail::shm::single_copy_bytes;
using ferry::detail::shm::SingleCopyBytes;

// Whether the last all_to_all on `g` ran by shared memory (not its fallback, where the ranks
// cannot read each other's memory: the byte counts below do not apply then).
struct ShmRan {
  const Group& g;
  uint64_t before = runs(g, Collective::AllToAll, Algorithm::SharedMemory);
  bool operator()() const {
    return runs(g, Collective::AllToAll, Algorithm::SharedMemory) == before + 1;
  }
};

// Rank 0 sends 5000 floats to each peer (more than its slot holds), every other rank 3: each
// rank takes its small blocks out of the senders' slots and rank 0's block through the kernel.
void small_blocks_in_slots(Group& world, Ctx& ctx) {
  Group g = world.split(0, world.rank());
  const int W = g.size(), me = g.rank();
  const int64_t big = 5000, small = 3;
  auto rows_from = [&](int sender) { return sender == 0 ? big : small; };
  std::vector<int64_t> in_splits(W, rows_from(me)), out_splits(W);
  for (int q = 0; q < W; ++q) out_splits[q] = rows_from(q);
  Tensor in = ferry::empty({rows_from(me) * W});
  for (int64_t i = 0; i < in.numel(); ++i) in.set_flat(i, 1000.0 * me + static_cast<double>(i));
  auto exchanged = [&](const char* algo) {
    ScopedAlgorithm o(std::string("all_to_all:") + algo);
    Tensor out = ferry::full({sum_of(out_splits)}, -1.0);
    ferry::all_to_all_single(in, out, out_splits, in_splits, g).wait();
    return out;
  };
  const Tensor by_pairwise = exchanged("pairwise");
  const SingleCopyBytes before = single_copy_bytes();
  ShmRan ran{g};
  const Tensor by_shm = exchanged("shm");
  const SingleCopyBytes after = single_copy_bytes();
  const std::string w = where(g, "rank 0 large, the others small");
  ctx.expect(same_bytes(by_shm, by_pairwise), [&] { return w + ": shm and pairwise differ"; });
  if (!ran()) return;
  // From every peer but rank 0: 3 floats out of its slot; from rank 0 (if a peer): 5000.
  const uint64_t small_peers = static_cast<uint64_t>(me == 0 ? W - 1 : W - 2);
  const uint64_t want_slot = small_peers * small * 4, want_read = me == 0 ? 0 : big * 4;
  const uint64_t slot = after.in_slot - before.in_slot;
  const uint64_t read = (after.by_kernel - before.by_kernel) + (after.mapped - before.mapped);
  ctx.expect(slot == want_slot && read == want_read && after.staged == before.staged, [&] {
    return w + ": expected " + std::to_string(want_slot) + " B out of slots and " +
           std::to_string(want_read) + " B read where they lie, none staged; given " +
           std::to_string(slot) + ", " + std::to_string(read) + " and " +
           std::to_string(after.staged - before.staged);
  });
}

// torchrec's pooled layout: rank q's rows of this rank's [B W, D] input go to q, which puts
// every rank's D columns side by side in its [B, W D] output (scattered on the receive side).
struct Pooled {
  Tensor input, output;
  std::vector<BlockLayout> send, recv;
};
// With `columns` false each received block lands contiguous instead (a KJT part's way): the
// op is laid out all the same.
Pooled pooled(const Group& g, int64_t B, int64_t D, bool shared_input, bool columns = true) {
  const int W = g.size(), me = g.rank();
  Pooled p;
  p.input = shared_input ? ferry::empty_shared({B * W, D}) : ferry::empty({B * W, D});
  for (int64_t i = 0; i < p.input.numel(); ++i)
    p.input.set_flat(i, 100000.0 * me + static_cast<double>(i));
  p.output = ferry::full({B, W * D}, -1.0);
  for (int q = 0; q < W; ++q) {
    p.send.push_back({StridedRun{q * B * D, 1, B * D, 0}});
    p.recv.push_back(columns ? BlockLayout{StridedRun{q * D, B, D, W * D}}
                             : BlockLayout{StridedRun{q * B * D, 1, B * D, 0}});
  }
  return p;
}

void laid_out_blocks_staged(Group& world, Ctx& ctx) {
  Group g = world.split(0, world.rank());
  const int W = g.size();
  // 512 x 16 floats: 32 KiB a peer (above a slot); 4 x 2: 32 B a peer (in the slot). Blocks
  // received as columns (scattered) or contiguous: a laid-out op stages either way.
  struct Form {
    bool columns, shared_input;
  };
  for (const Form f :
       {Form{true, false}, Form{true, true}, Form{false, false}, Form{false, true}}) {
    const bool columns = f.columns, shared_input = f.shared_input;
    for (const int64_t B : {int64_t{512}, int64_t{4}}) {
      const int64_t D = B == 512 ? 16 : 2;
      const uint64_t block = static_cast<uint64_t>(B * D * 4), peers = static_cast<uint64_t>(W - 1);
      Pooled a = pooled(g, B, D, shared_input, columns), b = pooled(g, B, D, shared_input, columns);
      {
        ScopedAlgorithm o("all_to_all:pairwise");
        ferry::all_to_all_single(a.input, a.send, a.output, a.recv, g).wait();
      }
      const SingleCopyBytes before = single_copy_bytes();
      ShmRan ran{g};
      {
        ScopedAlgorithm o("all_to_all:shm");
        ferry::all_to_all_single(b.input, b.send, b.output, b.recv, g).wait();
      }
      const SingleCopyBytes after = single_copy_bytes();
      const std::string w = where(g, std::string(shared_input ? "shared" : "private") +
                                         " input, " + std::to_string(block) + " B a peer, " +
                                         (columns ? "columns" : "contiguous"));
      ctx.expect(same_bytes(a.output, b.output), [&] { return w + ": shm and pairwise differ"; });
      if (!ran()) continue;
      const bool in_slot = B == 4;
      const uint64_t want_staged = in_slot || shared_input ? 0 : peers * block;
      const uint64_t want_mapped = in_slot ? 0 : peers * block;
      const uint64_t want_slot = in_slot ? peers * block : 0;
      const uint64_t staged = after.staged - before.staged, mapped = after.mapped - before.mapped;
      const uint64_t slot = after.in_slot - before.in_slot;
      const uint64_t kernel = after.by_kernel - before.by_kernel;
      ctx.expect(staged == want_staged && mapped == want_mapped && slot == want_slot &&
                     kernel == 0,
                 [&] {
                   return w + ": expected staged " + std::to_string(want_staged) + ", mapped " +
                          std::to_string(want_mapped) + ", in slots " +
                          std::to_string(want_slot) + ", by the kernel 0; given " +
                          std::to_string(staged) + ", " + std::to_string(mapped) + ", " +
                          std::to_string(slot) + ", " + std::to_string(kernel);
                 });
    }
  }
}

// Several laid-out all-to-alls in flight at once, past the segment's depth, with staged and
// in-slot blocks mixed: each result as the pairwise exchange's.
void staged_ops_in_flight(Group& world, Ctx& ctx) {
  Group g = world.split(0, world.rank());
  std::vector<Pooled> by_shm, by_pairwise;
  for (int i = 0; i < 10; ++i) {
    const int64_t B = i % 2 == 0 ? 256 + 32 * i : 3;
    by_shm.push_back(pooled(g, B, 16, false));
    by_pairwise.push_back(pooled(g, B, 16, false));
  }
  {
    ScopedAlgorithm o("all_to_all:pairwise");
    for (Pooled& p : by_pairwise)
      ferry::all_to_all_single(p.input, p.send, p.output, p.recv, g).wait();
  }
  {
    ScopedAlgorithm o("all_to_all:shm");
    std::vector<Work> works;
    for (Pooled& p : by_shm)
      works.push_back(ferry::all_to_all_single(p.input, p.send, p.output, p.recv, g));
    for (Work& w : works) w.wait();
  }
  for (size_t i = 0; i < by_shm.size(); ++i)
    ctx.expect(same_bytes(by_shm[i].output, by_pairwise[i].output),
               [&] { return where(g, "op " + std::to_string(i)) + ": shm and pairwise differ"; });
}

bool add(const char* name, void (*body)(Group&, Ctx&)) {
  return register_spmd_case(name, "[shm]", body, not_one_host);
}

[[maybe_unused]] const bool registered =
    add("shm: all_to_all blocks that fit the sender's slot travel in it, larger ones are read "
        "where they lie",
        small_blocks_in_slots) &&
    add("shm: a laid-out all_to_all's private blocks above a slot are staged in shared memory",
        laid_out_blocks_staged) &&
    add("shm: laid-out all_to_alls in flight past the segment's depth, staged and in slots",
        staged_ops_in_flight);

}  // namespace
