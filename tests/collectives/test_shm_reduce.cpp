// The shared-memory path's reduce_scatter (equal blocks, split sizes with empty ranks, the list
// form) and reduce (collectives/shm/shm_all_reduce_large.cpp, shm_ops.cpp), forced with
// set_algorithm_override, must give the bytes the point-to-point algorithms give (the ring, the
// tree), for every dtype and reduction, through the slots and by single copy, in place and out
// of place, with GroupImpl::runs showing that shm ran; ops left in flight past the segment's
// depth complete; calls that differ across ranks raise MismatchError on every rank before any
// byte lands. The data are small integers (test_helpers.h's patterns), whose sums are exact in
// any order, so the ring's order and shm's rank order give the same bits. As test_shm.cpp: only
// where the group's ranks share a host (the mpiexec and UCX suites).
#include "checks.h"
#include "shm_checks.h"
#include "spmd_case.h"

#include <ferry/collectives/engine/group_impl.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

using namespace ftest;

namespace {

using ferry::Algorithm;
using ferry::Collective;

// Elements per rank's block: the whole input below a slot, just above it, and well above.
std::vector<int64_t> blocks_for(DType dt, int W) {
  const auto elem = static_cast<int64_t>(std::max<size_t>(4, ferry::dtype_size(dt)));
  return {0, 1, 37, 16000 / elem / W, 16384 / elem / W + 1, 30001};
}

// reduce_scatter of `in` (W equal blocks) forced to `algo`; in place: the output is this rank's
// block of a copy of `in`.
Tensor scattered(const Group& g, const Tensor& in, ReduceOp op, bool in_place, const char* algo) {
  ScopedAlgorithm o(std::string("reduce_scatter:") + algo);
  const int64_t block = in.size(0) / g.size();
  if (in_place) {
    Tensor whole = snapshot(in);
    Tensor own = whole.narrow(0, g.rank() * block, block);
    ferry::reduce_scatter(whole, own, g, op).wait();
    return snapshot(own);
  }
  Tensor out = ferry::zeros({block}, in.dtype());
  ferry::reduce_scatter(in, out, g, op).wait();
  return out;
}

void reduce_scatter_matches_ring(Group& world, Ctx& ctx) {
  Group g = world.split(0, world.rank());
  const int W = g.size();
  for (DType dt : shm_dtypes()) {
    for (ReduceOp op : ops_for(dt)) {
      for (int64_t block : blocks_for(dt, W)) {
        for (bool in_place : {false, true}) {
          Gen gen(pattern_for(op), dt, g.rank(), static_cast<uint64_t>(block * 11 + 3));
          Tensor in = make_tensor(gen, {block * W}, dt);
          const Tensor before = snapshot(in);
          const uint64_t ran = runs(g, Collective::ReduceScatter, Algorithm::SharedMemory);
          Tensor by_shm = scattered(g, in, op, in_place, "shm");
          Tensor by_ring = scattered(g, in, op, in_place, "ring");
          const std::string w = where(g, shape_string({block * W})) + " " +
                                ferry::dtype_name(dt) + (in_place ? " in place" : "");
          expect_as_other(ctx, g, w, Collective::ReduceScatter, ran, by_shm, by_ring, "ring");
          ctx.expect_unchanged(w + " input", in, before);
        }
      }
    }
  }
}

// reduce_scatter_v over `sizes` rows of `inner` elements, or its list form, forced to `algo`.
Tensor scattered_v(const Group& g, const Tensor& in, const std::vector<int64_t>& sizes,
                   bool list, const char* algo) {
  ScopedAlgorithm o(std::string("reduce_scatter:") + algo);
  Shape shape = in.shape();
  shape[0] = sizes[static_cast<size_t>(g.rank())];
  Tensor out = ferry::zeros(shape, in.dtype());
  if (list) {
    std::vector<Tensor> parts;
    int64_t at = 0;
    for (int64_t rows : sizes) {
      parts.push_back(snapshot(in.narrow(0, at, rows)));
      at += rows;
    }
    ferry::reduce_scatter(parts, out, g).wait();
  } else {
    ferry::reduce_scatter_v(in, out, sizes, g).wait();
  }
  return out;
}

void reduce_scatter_v_matches_ring(Group& world, Ctx& ctx) {
  Group g = world.split(0, world.rank());
  const int W = g.size();
  for (int64_t inner : {int64_t{3}, int64_t{4096}}) {
    for (uint64_t salt : {0u, 1u}) {
      std::vector<int64_t> sizes(static_cast<size_t>(W));
      for (int r = 0; r < W; ++r) sizes[static_cast<size_t>(r)] = (r + salt) % 3;  // some 0
      Gen gen(pattern_for(ReduceOp::Sum), DType::Float32, g.rank(), salt * 3 + inner);
      Tensor in = make_tensor(gen, {sum_of(sizes), inner}, DType::Float32);
      // One buffer, the list form, and the two mixed across ranks (even ranks a list): the
      // list form publishes where each of its blocks lies, which a peer of either form reads.
      for (const char* form : {"", " list", " mixed"}) {
        const bool list = form[0] != '\0' && (form[1] == 'l' || g.rank() % 2 == 0);
        const uint64_t ran = runs(g, Collective::ReduceScatter, Algorithm::SharedMemory);
        Tensor by_shm = scattered_v(g, in, sizes, list, "shm");
        Tensor by_ring = scattered_v(g, in, sizes, list, "ring");
        const std::string w = where(g, "reduce_scatter_v inner " + std::to_string(inner) +
                                           " salt " + std::to_string(salt)) +
                              form;
        expect_as_other(ctx, g, w, Collective::ReduceScatter, ran, by_shm, by_ring, "ring");
      }
    }
  }
}

// reduce of `in` to `root` forced to `algo`: the root's result (in place: into `in`'s copy), or
// an undefined tensor elsewhere, whose own output must stay as it was.
Tensor reduced_to(const Group& g, const Tensor& in, int root, ReduceOp op, bool in_place,
                  const char* algo, Ctx& ctx) {
  ScopedAlgorithm o(std::string("reduce:") + algo);
  Tensor src = snapshot(in);
  Tensor out = in_place ? src : ferry::full(in.shape(), 3, in.dtype());
  const Tensor out_before = snapshot(out);
  ferry::reduce(src, out, root, g, op).wait();
  if (g.rank() == root) return out;
  if (!in_place)
    ctx.expect_unchanged(where(g, "reduce's output off the root"), out, out_before);
  return Tensor();
}

void reduce_matches_tree(Group& world, Ctx& ctx) {
  Group g = world.split(0, world.rank());
  const int W = g.size();
  for (DType dt : shm_dtypes()) {
    for (ReduceOp op : ops_for(dt)) {
      for (int64_t n : blocks_for(dt, 1)) {
        for (int root : {0, W - 1}) {
          for (bool in_place : {false, true}) {
            Gen gen(pattern_for(op), dt, g.rank(), static_cast<uint64_t>(n * 5 + root));
            Tensor in = make_tensor(gen, {n}, dt);
            const uint64_t ran = runs(g, Collective::Reduce, Algorithm::SharedMemory);
            Tensor by_shm = reduced_to(g, in, root, op, in_place, "shm", ctx);
            Tensor by_tree = reduced_to(g, in, root, op, in_place, "tree", ctx);
            const std::string w = where(g, shape_string({n})) + " " + ferry::dtype_name(dt) +
                                  " root " + std::to_string(root) +
                                  (in_place ? " in place" : "");
            if (g.rank() == root)
              expect_as_other(ctx, g, w, Collective::Reduce, ran, by_shm, by_tree, "tree");
          }
        }
      }
    }
  }
}

// More ops in flight than the segment's depth, small and large, reduce_scatters and reduces
// interleaved, waited for in reverse.
void reductions_in_flight(Group& world, Ctx& ctx) {
  Group g = world.split(0, world.rank());
  ScopedAlgorithm o("reduce_scatter:shm,reduce:shm");
  const int W = g.size(), me = g.rank();
  std::vector<Tensor> ins, outs, srcs, roots;
  std::vector<Work> works;
  for (int k = 0; k < 14; ++k) {
    const int64_t n = k % 5 == 4 ? 40001 : 5;  // every fifth above the slots
    ins.push_back(ferry::full({n * W}, static_cast<double>(k + me)));
    outs.push_back(ferry::zeros({n}));
    works.push_back(ferry::reduce_scatter(ins.back(), outs.back(), g));
    srcs.push_back(ferry::full({n}, static_cast<double>(k * me)));
    roots.push_back(ferry::zeros({n}));
    works.push_back(ferry::reduce(srcs.back(), roots.back(), k % W, g));
  }
  for (size_t k = works.size(); k-- > 0;) works[k].wait();
  const double ranks_sum = W * (W - 1) / 2.0;
  for (int k = 0; k < 14; ++k) {
    const size_t i = static_cast<size_t>(k);
    const int64_t n = outs[i].numel();
    bool ok = outs[i].get_flat(0) == W * k + ranks_sum && outs[i].get_flat(n - 1) == W * k + ranks_sum;
    if (me == k % W)
      ok = ok && roots[i].get_flat(0) == k * ranks_sum && roots[i].get_flat(n - 1) == k * ranks_sum;
    ctx.expect(ok, [&] { return where(g, "in flight " + std::to_string(k)) + ": wrong values"; });
  }
}

void mismatches_found_first(Group& world, Ctx& ctx) {
  const int W = world.size(), me = world.rank();
  const bool odd = me % 2 == 1;
  ScopedAlgorithm o("reduce_scatter:shm,reduce:shm");
  // Blocks of 1900 vs 2200 float32: with 2 ranks through the slots on the even rank and by
  // single copy on the odd one; 5000 vs 5300: by single copy everywhere.
  for (int64_t block : {int64_t{1900}, int64_t{5000}}) {
    const int64_t n = odd ? block + 300 : block;
    Tensor in = ferry::full({n * W}, 1.0);
    Tensor out = ferry::full({n}, -7.0);
    expect_mismatch(world, ctx, "reduce_scatter of " + std::to_string(n) + " per rank",
                    [&](Group& g) { ferry::reduce_scatter(in, out, g).wait(); }, out);
  }
  {
    Tensor in = ferry::full({16}, 1.0);
    Tensor out = ferry::full({16}, -7.0);
    expect_mismatch(world, ctx, "reduce sum vs max",
                    [&](Group& g) {
                      ferry::reduce(in, out, 0, g, odd ? ReduceOp::Max : ReduceOp::Sum).wait();
                    },
                    out);
  }
  for (int64_t n : {int64_t{16}, int64_t{100000}}) {
    Tensor in = ferry::full({n}, 1.0);
    Tensor out = ferry::full({n}, -7.0);
    expect_mismatch(world, ctx, "reduce of " + std::to_string(n) + " to root 0 vs 1",
                    [&](Group& g) { ferry::reduce(in, out, odd ? 1 : 0, g).wait(); }, out);
  }
}

// Large out-of-place reductions, whose slices span many of the single copy's chunks and whose
// first peer piece of each chunk is read straight into the output: bit for bit what the direct
// exchange's all_reduce gives (the same rank order), on values whose float sums depend on the
// order of the additions (so a changed order would show), with every rank's slice uneven.
void large_out_of_place_match_direct(Group& world, Ctx& ctx) {
  Group g = world.split(0, world.rank());
  const int W = g.size(), me = g.rank();
  const int64_t block = (int64_t{4} << 20) / W + 1;  // ~16 MiB of float32 in all
  const int64_t n = block * W;
  // Two cases are enough here (16 MiB each): every dtype and reduction is compared above,
  // below a chunk.
  for (auto [dt, op] : {std::pair{DType::Float32, ReduceOp::Sum},
                        std::pair{DType::Float64, ReduceOp::Max}}) {
    Tensor in = ferry::empty({n}, dt);
    uint64_t x = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(me + 1);
    for (int64_t i = 0; i < n; ++i) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      // Magnitudes from 2^-8 to 2^8, either sign: sums round differently in another order.
      const double v = (static_cast<double>(x >> 11) * 0x1p-53 - 0.5) *
                       std::ldexp(1.0, static_cast<int>((x >> 3) % 17) - 8);
      in.set_flat(i, v);
    }
    const Tensor before = snapshot(in);
    const std::string w = where(g, std::to_string(n) + " " + ferry::dtype_name(dt) +
                                       (op == ReduceOp::Sum ? " sum" : " max"));
    Tensor by_direct = ferry::empty({n}, dt);
    {
      ScopedAlgorithm o("all_reduce:direct");
      ferry::all_reduce(in, by_direct, g, op).wait();
    }
    ScopedAlgorithm o("all_reduce:shm,reduce_scatter:shm,reduce:shm");
    const uint64_t ar = runs(g, Collective::AllReduce, Algorithm::SharedMemory);
    const uint64_t rs = runs(g, Collective::ReduceScatter, Algorithm::SharedMemory);
    Tensor by_shm = ferry::full({n}, -7.0, dt);
    ferry::all_reduce(in, by_shm, g, op).wait();
    ctx.expect(same_bytes(by_shm, by_direct),
               [&] { return w + ": all_reduce: shm and direct differ"; });
    Tensor scattered_out = ferry::full({block}, -7.0, dt);
    ferry::reduce_scatter(in, scattered_out, g, op).wait();
    ctx.expect(same_bytes(scattered_out, by_direct.narrow(0, me * block, block)),
               [&] { return w + ": reduce_scatter: shm and direct's block differ"; });
    const int root = W - 1;
    Tensor reduced_out = me == root ? ferry::full({n}, -7.0, dt) : Tensor();
    ferry::reduce(in, reduced_out, root, g, op).wait();
    if (me == root)
      ctx.expect(same_bytes(reduced_out, by_direct),
                 [&] { return w + ": reduce: shm and direct differ on the root"; });
    ctx.expect_unchanged(w + " input", in, before);
    ctx.expect(runs(g, Collective::AllReduce, Algorithm::SharedMemory) == ar + 1 &&
                   runs(g, Collective::ReduceScatter, Algorithm::SharedMemory) == rs + 1,
               [&] { return w + ": shm did not run"; });
  }
}

bool add(const char* name, void (*body)(Group&, Ctx&)) {
  return register_spmd_case(name, "[shm]", body, not_one_host);
}

[[maybe_unused]] const bool registered =
    add("shm: reduce_scatter equals the ring, every dtype and reduction, in and out of place",
        reduce_scatter_matches_ring) &&
    add("shm: reduce_scatter_v and the list form equal the ring, empty ranks",
        reduce_scatter_v_matches_ring) &&
    add("shm: reduce equals the tree, every dtype and reduction", reduce_matches_tree) &&
    add("shm: reductions in flight past the segment's depth", reductions_in_flight) &&
    add("shm: reductions whose calls differ raise MismatchError first", mismatches_found_first) &&
    add("shm: 16 MiB out-of-place all_reduce, reduce_scatter and reduce equal the direct "
        "exchange bit for bit", large_out_of_place_match_direct);

}  // namespace
