// Where the shared-memory all_to_all's bytes go (collectives/shm/shm_all_to_all.cpp), counted
// by detail::shm::single_copy_bytes on the rank that moves them:
//  - a rank whose blocks for its peers all fit its slot copies them there, and each peer copies
//    its block out of the slot (`in_slot` on the reader), whatever the other ranks do;
//  - a larger block whose receive block lies in the receiver's shared memory is written there
//    by its sender (`written` on the sender), laid out or not;
//  - any other larger block is read by its receiver where it lies: by mapping when the send
//    block is in shared memory (`mapped`), else through the kernel (`by_kernel`).
// Each result is compared with the pairwise exchange's. The counters are per process: these
// cases run under mpiexec and the UCX launcher (one process per rank), on one host.
#include "checks.h"
#include "shm_checks.h"
#include "spmd_case.h"

#include <ferry/collectives/engine/group_impl.h>
#include <ferry/collectives/shm/peer_arenas.h>

#include <catch2/catch.hpp>

#include <random>
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
  ctx.expect(slot == want_slot && read == want_read && after.written == before.written, [&] {
    return w + ": expected " + std::to_string(want_slot) + " B out of slots and " +
           std::to_string(want_read) + " B read where they lie, none written; given " +
           std::to_string(slot) + ", " + std::to_string(read) + " and " +
           std::to_string(after.written - before.written);
  });
}

// torchrec's pooled layout: rank q's rows of this rank's [B W, D] input go to q, which puts
// every rank's D columns side by side in its [B, W D] output (scattered on the receive side).
struct Pooled {
  Tensor input, output;
  std::vector<BlockLayout> send, recv;
};
// With `columns` false each received block lands contiguous instead (a KJT part's way): the
// op is laid out all the same. Either tensor in shared memory or not.
Pooled pooled(const Group& g, int64_t B, int64_t D, bool shared_input, bool shared_output,
              bool columns = true) {
  const int W = g.size(), me = g.rank();
  Pooled p;
  p.input = shared_input ? ferry::empty_shared({B * W, D}) : ferry::empty({B * W, D});
  for (int64_t i = 0; i < p.input.numel(); ++i)
    p.input.set_flat(i, 100000.0 * me + static_cast<double>(i));
  p.output = shared_output ? ferry::empty_shared({B, W * D}) : ferry::empty({B, W * D});
  p.output.fill_(-1.0);
  for (int q = 0; q < W; ++q) {
    p.send.push_back({StridedRun{q * B * D, 1, B * D, 0}});
    p.recv.push_back(columns ? BlockLayout{StridedRun{q * D, B, D, W * D}}
                             : BlockLayout{StridedRun{q * B * D, 1, B * D, 0}});
  }
  return p;
}

// Every form of a laid-out all_to_all: blocks received as columns (scattered) or contiguous;
// the input and the output in shared memory or not, on every rank alike or (`mixed`) the
// output shared on rank 0 only; blocks above a slot or in it.
void laid_out_blocks_written_or_read(Group& world, Ctx& ctx) {
  Group g = world.split(0, world.rank());
  const int W = g.size(), me = g.rank();
  struct Form {
    bool columns, shared_input, shared_output, mixed;
  };
  std::vector<Form> forms;
  for (const bool columns : {true, false})
    for (const bool shared_input : {false, true})
      for (const bool shared_output : {false, true})
        forms.push_back({columns, shared_input, shared_output, false});
  forms.push_back({true, false, true, true});
  forms.push_back({false, true, true, true});
  for (const Form& f : forms) {
    // 512 x 16 floats: 32 KiB a peer (above a slot); 4 x 2: 32 B a peer (in the slot).
    for (const int64_t B : {int64_t{512}, int64_t{4}}) {
      const int64_t D = B == 512 ? 16 : 2;
      const uint64_t block = static_cast<uint64_t>(B * D * 4), peers = static_cast<uint64_t>(W - 1);
      auto output_shared_on = [&](int r) { return f.shared_output && (!f.mixed || r == 0); };
      Pooled a = pooled(g, B, D, f.shared_input, output_shared_on(me), f.columns);
      Pooled b = pooled(g, B, D, f.shared_input, output_shared_on(me), f.columns);
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
      const char* output = f.mixed           ? "rank 0's output shared"
                           : f.shared_output ? "shared output"
                                             : "private output";
      const std::string w =
          where(g, std::string(f.shared_input ? "shared" : "private") + " input, " + output +
                       ", " + std::to_string(block) + " B a peer, " +
                       (f.columns ? "columns" : "contiguous"));
      ctx.expect(same_bytes(a.output, b.output), [&] { return w + ": shm and pairwise differ"; });
      if (!ran()) continue;
      // This rank writes its block into every peer whose output is shared, and reads from
      // every peer if its own output is not.
      uint64_t want_written = 0, want_read = 0, want_slot = 0;
      if (B == 4) {
        want_slot = peers * block;
      } else {
        for (int q = 0; q < W; ++q)
          if (q != me && output_shared_on(q)) want_written += block;
        if (!output_shared_on(me)) want_read = peers * block;
      }
      const uint64_t want_mapped = f.shared_input ? want_read : 0;
      const uint64_t want_kernel = f.shared_input ? 0 : want_read;
      const uint64_t written = after.written - before.written;
      const uint64_t mapped = after.mapped - before.mapped;
      const uint64_t kernel = after.by_kernel - before.by_kernel;
      const uint64_t slot = after.in_slot - before.in_slot;
      ctx.expect(written == want_written && mapped == want_mapped && kernel == want_kernel &&
                     slot == want_slot,
                 [&] {
                   return w + ": expected written " + std::to_string(want_written) +
                          ", mapped " + std::to_string(want_mapped) + ", by the kernel " +
                          std::to_string(want_kernel) + ", in slots " +
                          std::to_string(want_slot) + "; given " + std::to_string(written) +
                          ", " + std::to_string(mapped) + ", " + std::to_string(kernel) + ", " +
                          std::to_string(slot);
                 });
    }
  }
}

// Several laid-out all-to-alls in flight at once, past the segment's depth, with written,
// read and in-slot blocks mixed: each result as the pairwise exchange's.
void ops_in_flight(Group& world, Ctx& ctx) {
  Group g = world.split(0, world.rank());
  std::vector<Pooled> by_shm, by_pairwise;
  for (int i = 0; i < 12; ++i) {
    const int64_t B = i % 3 == 0 ? 3 : 256 + 32 * i;
    const bool shared_output = i % 3 == 1;
    by_shm.push_back(pooled(g, B, 16, false, shared_output));
    by_pairwise.push_back(pooled(g, B, 16, false, shared_output));
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

// Random all-to-alls, eight in flight at a time: per pair a block of none, a few or up to 9000
// floats (in the slot or above it), each rank's output in shared memory or not (drawn per op
// and rank, so that some peers write into it and others are read), by split sizes or through
// the pooled layout (columns, or contiguous blocks); each result as the pairwise exchange's.
// Every rank draws the same numbers.
void random_ops_in_flight(Group& world, Ctx& ctx) {
  Group g = world.split(0, world.rank());
  const int W = g.size(), me = g.rank();
  std::mt19937_64 rng(20261201);
  const SingleCopyBytes before = single_copy_bytes();
  const uint64_t shm_runs = runs(g, Collective::AllToAll, Algorithm::SharedMemory);
  struct Split {
    Tensor in, out;
    std::vector<int64_t> in_splits, out_splits;
  };
  for (int round = 0; round < 3; ++round) {
    std::vector<Split> by_shm, by_pairwise;
    std::vector<Pooled> laid_shm, laid_pairwise;
    for (int i = 0; i < 8; ++i) {
      const bool shared_output = (rng() >> me) & 1;
      if (i % 2 == 1) {
        const int64_t B = static_cast<int64_t>(1 + rng() % 600);
        const int64_t D = static_cast<int64_t>(1 + rng() % 24);
        const bool shared_input = rng() % 2 == 0, columns = rng() % 2 == 0;
        laid_shm.push_back(pooled(g, B, D, shared_input, shared_output, columns));
        laid_pairwise.push_back(pooled(g, B, D, false, false, columns));
        continue;
      }
      // rows[s][r]: what rank s sends rank r.
      std::vector<std::vector<int64_t>> rows(W, std::vector<int64_t>(W, 0));
      for (auto& from : rows)
        for (int64_t& n : from) {
          const uint64_t kind = rng() % 4;
          n = kind == 0 ? 0 : static_cast<int64_t>(rng() % (kind == 1 ? 50 : 9000));
        }
      auto make = [&](bool shared) {
        Split o;
        for (int r = 0; r < W; ++r) {
          o.in_splits.push_back(rows[me][r]);
          o.out_splits.push_back(rows[r][me]);
        }
        o.in = ferry::empty({sum_of(o.in_splits)});
        for (int64_t k = 0; k < o.in.numel(); ++k)
          o.in.set_flat(k, 1e6 * me + 1000.0 * round + static_cast<double>(k));
        o.out = shared ? ferry::empty_shared({sum_of(o.out_splits)})
                       : ferry::empty({sum_of(o.out_splits)});
        o.out.fill_(-1.0);
        return o;
      };
      by_shm.push_back(make(shared_output));
      by_pairwise.push_back(make(false));
    }
    {
      ScopedAlgorithm o("all_to_all:pairwise");
      for (Split& s : by_pairwise)
        ferry::all_to_all_single(s.in, s.out, s.out_splits, s.in_splits, g).wait();
      for (Pooled& p : laid_pairwise)
        ferry::all_to_all_single(p.input, p.send, p.output, p.recv, g).wait();
    }
    {
      ScopedAlgorithm o("all_to_all:shm");
      std::vector<Work> works;
      for (size_t i = 0; i < by_shm.size(); ++i) {
        Split& s = by_shm[i];
        works.push_back(ferry::all_to_all_single(s.in, s.out, s.out_splits, s.in_splits, g));
        Pooled& p = laid_shm[i];
        works.push_back(ferry::all_to_all_single(p.input, p.send, p.output, p.recv, g));
      }
      for (Work& w : works) w.wait();
    }
    for (size_t i = 0; i < by_shm.size(); ++i) {
      const std::string w = where(g, "round " + std::to_string(round) + ", op " +
                                         std::to_string(i));
      ctx.expect(same_bytes(by_shm[i].out, by_pairwise[i].out),
                 [&] { return w + " (split sizes): shm and pairwise differ"; });
      ctx.expect(same_bytes(laid_shm[i].output, laid_pairwise[i].output),
                 [&] { return w + " (laid out): shm and pairwise differ"; });
    }
  }
  // Across the group, some blocks were written by their senders and some read by their
  // receivers (unless the ranks cannot read each other's memory: no shm ran then).
  if (runs(g, Collective::AllToAll, Algorithm::SharedMemory) == shm_runs) return;
  const SingleCopyBytes after = single_copy_bytes();
  Tensor moved = ferry::full({2}, 0.0, ferry::DType::Float64);
  moved.set_flat(0, static_cast<double>(after.written - before.written));
  moved.set_flat(1, static_cast<double>((after.mapped - before.mapped) +
                                        (after.by_kernel - before.by_kernel)));
  ferry::all_reduce(moved, g).wait();
  ctx.expect(moved.get_flat(0) > 0 && moved.get_flat(1) > 0, [&] {
    return where(g, "the random ops") + ": expected bytes both written and read across the "
                                         "group; given " +
           std::to_string(moved.get_flat(0)) + " written, " + std::to_string(moved.get_flat(1)) +
           " read";
  });
}

// The all_to_all of tensor lists: per pair a block of none, a few or up to 9000 rows, whose
// output has another shape than its input (only the bytes agree); inputs and outputs in shared
// memory or not; eight in flight at once. Each result as the pairwise exchange's, each Work's
// outputs the list given, and no block written by its sender, even into a shared output: a
// list's receiver reads every block itself (its Work could not keep the outputs for the life
// of the process if the op failed while a peer wrote). Every rank draws the same numbers.
void tensor_lists(Group& world, Ctx& ctx) {
  Group g = world.split(0, world.rank());
  const int W = g.size(), me = g.rank();
  std::mt19937_64 rng(20261202);
  struct Lists {
    std::vector<Tensor> in, out;
  };
  std::vector<Lists> by_shm, by_pairwise;
  for (int op = 0; op < 8; ++op) {
    // rows[s][r]: what rank s sends rank r, `cols` floats a row.
    std::vector<std::vector<int64_t>> rows(W, std::vector<int64_t>(W, 0));
    for (auto& from : rows)
      for (int64_t& n : from) {
        const uint64_t kind = rng() % 4;
        n = kind == 0 ? 0 : static_cast<int64_t>(rng() % (kind == 1 ? 50 : 9000));
      }
    const int64_t cols = static_cast<int64_t>(1 + rng() % 3);
    const bool shared_in = rng() % 2 == 0, shared_out = (rng() >> me) & 1;
    auto make = [&](bool in_shared, bool out_shared) {
      Lists l;
      for (int r = 0; r < W; ++r) {
        const Shape in_shape{rows[me][r], cols}, out_shape{rows[r][me] * cols};
        l.in.push_back(in_shared && rows[me][r] > 0 ? ferry::empty_shared(in_shape)
                                                     : ferry::empty(in_shape));
        for (int64_t k = 0; k < l.in.back().numel(); ++k)
          l.in.back().set_flat(k, 1e6 * me + 1e4 * r + 10.0 * static_cast<double>(k) + op);
        l.out.push_back(out_shared && rows[r][me] > 0 ? ferry::empty_shared(out_shape)
                                                       : ferry::empty(out_shape));
        l.out.back().fill_(-1.0);
      }
      return l;
    };
    by_shm.push_back(make(shared_in, shared_out));
    by_pairwise.push_back(make(false, false));
  }
  {
    ScopedAlgorithm o("all_to_all:pairwise");
    for (Lists& l : by_pairwise) ferry::all_to_all(l.in, l.out, g).wait();
  }
  const SingleCopyBytes before = single_copy_bytes();
  const uint64_t shm_runs = runs(g, Collective::AllToAll, Algorithm::SharedMemory);
  std::vector<Work> works;
  for (Lists& l : by_shm) works.push_back(ferry::all_to_all(l.in, l.out, g));  // the table's
  for (Work& w : works) w.wait();
  const SingleCopyBytes after = single_copy_bytes();
  for (size_t i = 0; i < by_shm.size(); ++i) {
    const std::string w = where(g, "op " + std::to_string(i));
    const std::vector<Tensor>& given = works[i].outputs();
    bool same_list = given.size() == by_shm[i].out.size();
    for (size_t k = 0; same_list && k < given.size(); ++k)
      same_list = given[k].raw_data() == by_shm[i].out[k].raw_data();
    ctx.expect(same_list, [&] { return w + ": the Work's outputs are not the list given"; });
    for (int r = 0; r < W; ++r)
      ctx.expect(same_bytes(by_shm[i].out[r], by_pairwise[i].out[r]), [&] {
        return w + ", block from rank " + std::to_string(r) + ": shm and pairwise differ";
      });
  }
  // The table takes shm for the lists on one host (unless the ranks cannot read each other's
  // memory: the pairwise exchange ran then, recorded as such).
  const uint64_t ran = runs(g, Collective::AllToAll, Algorithm::SharedMemory) - shm_runs;
  ctx.expect(ran == by_shm.size() || ran == 0, [&] {
    return where(g, "the lists") + ": shm ran " + std::to_string(ran) + " of " +
           std::to_string(by_shm.size()) + " times";
  });
  ctx.expect(after.written == before.written, [&] {
    return where(g, "the lists") + ": " + std::to_string(after.written - before.written) +
           " B written by senders into lists' outputs";
  });
}

bool add(const char* name, void (*body)(Group&, Ctx&)) {
  return register_spmd_case(name, "[shm]", body, not_one_host);
}

[[maybe_unused]] const bool registered =
    add("shm: all_to_all blocks that fit the sender's slot travel in it, larger ones are read "
        "where they lie",
        small_blocks_in_slots) &&
    add("shm: a laid-out all_to_all's blocks above a slot are written by their senders into "
        "receive blocks in shared memory, else read by their receivers",
        laid_out_blocks_written_or_read) &&
    add("shm: laid-out all_to_alls in flight past the segment's depth, written, read and in "
        "slots",
        ops_in_flight) &&
    add("shm: random all_to_alls in flight, outputs shared on some ranks, against the pairwise "
        "exchange",
        random_ops_in_flight) &&
    add("shm: all_to_alls of tensor lists in flight, each block read by its receiver, against "
        "the pairwise exchange",
        tensor_lists);

}  // namespace
