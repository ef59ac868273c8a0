// The shared-memory path's gathers (collectives/shm/shm_gather.cpp, gather_blocks.h): all_gather
// (equal blocks, split sizes with empty ranks, sizes exchanged by the op) and broadcast, forced
// with set_algorithm_override, must give the bytes the point-to-point algorithms give (the ring,
// the tree), through the slots and by single copy, in place and out of place, with
// GroupImpl::runs showing that shm ran; ops left in flight past the segment's depth complete;
// calls that differ across ranks raise MismatchError on every rank before any byte lands; gathers
// whose outputs outgrow the cache write with streaming stores and give the same bytes. As
// test_shm.cpp: only where the group's ranks share a host (the mpiexec and UCX suites).
#include "checks.h"
#include "shm_checks.h"
#include "spmd_case.h"

#include <ferry/collectives/engine/group_impl.h>
#include <ferry/collectives/shm/peer_arenas.h>
#include <ferry/collectives/shm/store_chooser.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

using namespace ftest;

namespace {

using ferry::Algorithm;
using ferry::Collective;

// Elements per rank that put a block below the slots, just above them (single copy), and well
// above them; and the small edge cases.
std::vector<int64_t> counts_for(DType dt) {
  const auto elem = static_cast<int64_t>(ferry::dtype_size(dt));
  return {0, 1, 37, 16000 / elem, 16384 / elem + 1, 70001};
}

// all_gather of `in` forced to `algo`; in place: `in` is first copied to its block of the
// output, which is then the input. `shared`: the output in shared memory (peers write there).
Tensor gathered(const Group& g, const Tensor& in, bool in_place, const char* algo,
                bool shared = false) {
  ScopedAlgorithm o(std::string("all_gather:") + algo);
  Shape shape = in.shape();
  const int64_t rows = shape[0];
  shape[0] *= g.size();
  Tensor out = shared ? ferry::empty_shared(shape, in.dtype()) : ferry::empty(shape, in.dtype());
  out.fill_(0);
  if (in_place) {
    Tensor own = out.narrow(0, g.rank() * rows, rows);
    own.copy_(in);
    ferry::all_gather(own, out, g).wait();
  } else {
    ferry::all_gather(in, out, g).wait();
  }
  return out;
}

void all_gather_matches_ring(Group& world, Ctx& ctx) {
  Group g = world.split(0, world.rank());
  for (DType dt : shm_dtypes()) {
    for (int64_t n : counts_for(dt)) {
      for (bool in_place : {false, true}) {
        Gen gen(pattern_for(ReduceOp::Sum), dt, g.rank(), static_cast<uint64_t>(n * 7 + 1));
        Tensor in = make_tensor(gen, {n}, dt);
        const Tensor before = snapshot(in);
        const uint64_t ran = runs(g, Collective::AllGather, Algorithm::SharedMemory);
        Tensor by_shm = gathered(g, in, in_place, "shm");
        Tensor by_ring = gathered(g, in, in_place, "ring");
        const std::string w = where(g, shape_string({n})) + " " + ferry::dtype_name(dt) +
                              (in_place ? " in place" : "");
        expect_as_other(ctx, g, w, Collective::AllGather, ran, by_shm, by_ring, "ring");
        ctx.expect_unchanged(w + " input", in, before);
      }
    }
  }
}

// all_gather_v with `sizes` rows of `inner` elements, forced to `algo`; `exchanged`: the form
// that learns the sizes itself.
Tensor gathered_v(const Group& g, const Tensor& in, const std::vector<int64_t>& sizes,
                  bool exchanged, const char* algo) {
  ScopedAlgorithm o(std::string("all_gather:") + algo);
  if (exchanged) {
    Work w = ferry::all_gather_v(in, g);
    w.wait();
    return w.output(0);
  }
  Shape shape = in.shape();
  shape[0] = sum_of(sizes);
  Tensor out = ferry::zeros(shape, in.dtype());
  ferry::all_gather_v(in, out, sizes, g).wait();
  return out;
}

void all_gather_v_matches_ring(Group& world, Ctx& ctx) {
  Group g = world.split(0, world.rank());
  const int W = g.size(), me = g.rank();
  for (int64_t inner : {int64_t{3}, int64_t{4096}}) {
    for (uint64_t salt : {0u, 1u, 2u}) {
      // Rows per rank 0, 1 or 2 (some ranks empty), or every rank empty (salt 2 on inner 3).
      std::vector<int64_t> sizes(static_cast<size_t>(W));
      for (int r = 0; r < W; ++r)
        sizes[static_cast<size_t>(r)] = salt == 2 && inner == 3 ? 0 : (r + salt) % 3;
      Gen gen(pattern_for(ReduceOp::Sum), DType::Float32, me, salt * 5 + inner);
      Tensor in = make_tensor(gen, {sizes[static_cast<size_t>(me)], inner}, DType::Float32);
      for (bool exchanged : {false, true}) {
        const uint64_t ran = runs(g, Collective::AllGather, Algorithm::SharedMemory);
        Tensor by_shm = gathered_v(g, in, sizes, exchanged, "shm");
        Tensor by_ring = gathered_v(g, in, sizes, exchanged, "ring");
        const std::string w = where(g, "all_gather_v inner " + std::to_string(inner) + " salt " +
                                            std::to_string(salt)) +
                              (exchanged ? " exchanged sizes" : "");
        expect_as_other(ctx, g, w, Collective::AllGather, ran, by_shm, by_ring, "ring");
      }
    }
  }
}

// broadcast of rank `root`'s `values` forced to `algo`, on every rank's copy.
Tensor broadcasted(const Group& g, const Tensor& values, int root, const char* algo) {
  ScopedAlgorithm o(std::string("broadcast:") + algo);
  Tensor t = g.rank() == root ? snapshot(values) : ferry::zeros(values.shape(), values.dtype());
  ferry::broadcast(t, root, g).wait();
  return t;
}

void broadcast_matches_tree(Group& world, Ctx& ctx) {
  Group g = world.split(0, world.rank());
  for (DType dt : shm_dtypes()) {
    for (int64_t n : counts_for(dt)) {
      for (int root = 0; root < g.size(); ++root) {
        if (root != 0 && root != g.size() - 1) continue;  // the first and last are enough
        Gen gen(pattern_for(ReduceOp::Sum), dt, root, static_cast<uint64_t>(n * 3 + 2));
        Tensor values = make_tensor(gen, {n}, dt);
        const uint64_t ran = runs(g, Collective::Broadcast, Algorithm::SharedMemory);
        Tensor by_shm = broadcasted(g, values, root, "shm");
        Tensor by_tree = broadcasted(g, values, root, "tree");
        const std::string w = where(g, shape_string({n})) + " " + ferry::dtype_name(dt) +
                              " root " + std::to_string(root);
        ctx.expect(same_bytes(by_shm, by_tree), [&] { return w + ": shm and tree differ"; });
        ctx.expect(same_bytes(by_shm, values), [&] { return w + ": not the root's values"; });
        ctx.expect(runs(g, Collective::Broadcast, Algorithm::SharedMemory) == ran + 1,
                   [&] { return w + ": shm did not run"; });
      }
    }
  }
}

// A large gather whose outputs outgrow the last-level cache writes with streaming stores
// (shm_gather_large.cpp): with the cache taken as 4 KiB, every gather above the slots does,
// into its own output and into peers' shared outputs, at offsets that are not a multiple of
// 16 bytes too (the stores' aligned body, and the ordinary copies of its head and tail).
void streamed_gathers_match(Group& world, Ctx& ctx) {
  Group g = world.split(0, world.rank());
  struct SmallCache {
    size_t before = ferry::detail::shm::set_last_level_cache_bytes_for_testing(4096);
    ~SmallCache() { ferry::detail::shm::set_last_level_cache_bytes_for_testing(before); }
  } small;
  using ferry::detail::shm::single_copy_bytes;
  for (DType dt : {DType::Float32, DType::Float16}) {
    const auto elem = static_cast<int64_t>(ferry::dtype_size(dt));
    for (int64_t n : {16384 / elem + 1, int64_t{70001}}) {
      for (bool in_place : {false, true}) {
        for (bool shared : {false, true}) {
          Gen gen(pattern_for(ReduceOp::Sum), dt, g.rank(), static_cast<uint64_t>(n + 11));
          Tensor in = make_tensor(gen, {n}, dt);
          const uint64_t ran = runs(g, Collective::AllGather, Algorithm::SharedMemory);
          const auto before = single_copy_bytes();
          Tensor by_shm = gathered(g, in, in_place, "shm", shared);
          const auto after = single_copy_bytes();
          Tensor by_ring = gathered(g, in, in_place, "ring");
          const std::string w = where(g, "streamed " + shape_string({n})) + " " +
                                ferry::dtype_name(dt) + (in_place ? " in place" : "") +
                                (shared ? " shared" : "");
          expect_as_other(ctx, g, w, Collective::AllGather, ran, by_shm, by_ring, "ring");
          // Every byte this rank stored streams: its block into its own output (out of place)
          // and into each peer that took it (peers write into a shared output of an op started
          // at issue; one queued behind another op reads its blocks itself).
          const uint64_t own = in_place ? 0 : static_cast<uint64_t>(n * elem);
          const uint64_t into_peers = after.written - before.written;
          const uint64_t streamed = after.streamed - before.streamed;
          ctx.expect(streamed == own + into_peers, [&] {
            return w + ": " + std::to_string(streamed) + " B written with streaming stores, " +
                   "expected " + std::to_string(own) + " into its own output and " +
                   std::to_string(into_peers) + " into its peers'";
          });
        }
      }
    }
  }
  // A broadcast from the last rank into shared outputs, which the root writes where the peers
  // take its writes, with streaming stores too.
  const int root = g.size() - 1;
  Gen gen(pattern_for(ReduceOp::Sum), DType::Float32, root, 5);
  Tensor values = make_tensor(gen, {50001}, DType::Float32);
  Tensor t = ferry::empty_shared(values.shape(), values.dtype());
  if (g.rank() == root)
    t.copy_(values);
  else
    t.fill_(0);
  {
    ScopedAlgorithm o("broadcast:shm");
    ferry::broadcast(t, root, g).wait();
  }
  ctx.expect(same_bytes(t, values), [&] { return where(g, "streamed broadcast") + ": not the "
                                                "root's values"; });
}

// More ops in flight than the segment's depth, small and large, all_gathers and broadcasts
// interleaved, waited for in reverse.
void gathers_in_flight(Group& world, Ctx& ctx) {
  Group g = world.split(0, world.rank());
  ScopedAlgorithm o("all_gather:shm,broadcast:shm");
  const int W = g.size(), me = g.rank();
  std::vector<Tensor> ins, outs, casts;
  std::vector<Work> works;
  for (int k = 0; k < 14; ++k) {
    const int64_t n = k % 5 == 4 ? 50001 : 5;  // every fifth above the slots
    ins.push_back(ferry::full({n}, static_cast<double>(100 * k + me)));
    outs.push_back(ferry::zeros({n * W}));
    works.push_back(ferry::all_gather(ins.back(), outs.back(), g));
    casts.push_back(ferry::full({n}, me == k % W ? static_cast<double>(k) : -1.0));
    works.push_back(ferry::broadcast(casts.back(), k % W, g));
  }
  for (size_t k = works.size(); k-- > 0;) works[k].wait();
  for (int k = 0; k < 14; ++k) {
    const int64_t n = ins[static_cast<size_t>(k)].numel();
    bool ok = casts[static_cast<size_t>(k)].get_flat(n - 1) == k;
    for (int r = 0; r < W; ++r)
      ok = ok && outs[static_cast<size_t>(k)].get_flat(r * n) == 100 * k + r &&
           outs[static_cast<size_t>(k)].get_flat(r * n + n - 1) == 100 * k + r;
    ctx.expect(ok, [&] { return where(g, "in flight " + std::to_string(k)) + ": wrong values"; });
  }
}

void mismatches_found_first(Group& world, Ctx& ctx) {
  const int W = world.size(), me = world.rank();
  const bool odd = me % 2 == 1;
  ScopedAlgorithm o("all_gather:shm,broadcast:shm");
  // Through the slots on the even ranks, by single copy on the odd ones.
  {
    const int64_t n = odd ? 4200 : 4000;
    Tensor in = ferry::full({n}, 1.0);
    Tensor out = ferry::full({n * W}, -7.0);
    expect_mismatch(world, ctx, "all_gather of 4000 vs 4200 float32",
                    [&](Group& g) { ferry::all_gather(in, out, g).wait(); }, out);
  }
  // Split sizes that differ (the same total), the large blocks read by single copy.
  {
    std::vector<int64_t> sizes(static_cast<size_t>(W), 2);
    if (odd) {
      sizes[0] = 1;
      sizes[1] = 3;
    }
    Tensor in = ferry::full({sizes[static_cast<size_t>(me)], 8192}, 1.0);
    Tensor out = ferry::full({2 * W, 8192}, -7.0);
    expect_mismatch(world, ctx, "all_gather_v split 2,2,... vs 1,3,...",
                    [&](Group& g) { ferry::all_gather_v(in, out, sizes, g).wait(); }, out);
  }
  // Different roots, small and large: a rank that is its own root sends 5, the others' -7
  // must stay.
  for (int64_t n : {int64_t{16}, int64_t{100000}}) {
    const int root = odd ? 1 : 0;
    Tensor t = ferry::full({n}, me == root ? 5.0 : -7.0);
    expect_mismatch(world, ctx, "broadcast of " + std::to_string(n) + " from root 0 vs 1",
                    [&](Group& g) { ferry::broadcast(t, root, g).wait(); },
                    me == root ? Tensor() : t);
  }
}

bool add(const char* name, void (*body)(Group&, Ctx&)) {
  return register_spmd_case(name, "[shm]", body, not_one_host);
}

[[maybe_unused]] const bool registered =
    add("shm: all_gather equals the ring, every dtype, in and out of place",
        all_gather_matches_ring) &&
    add("shm: all_gather_v equals the ring, empty ranks, exchanged sizes",
        all_gather_v_matches_ring) &&
    add("shm: broadcast equals the tree, every dtype", broadcast_matches_tree) &&
    add("shm: gathers that outgrow the cache, with streaming stores, equal the ring",
        streamed_gathers_match) &&
    add("shm: gathers in flight past the segment's depth", gathers_in_flight) &&
    add("shm: gathers whose calls differ raise MismatchError first", mismatches_found_first);

}  // namespace
