// The shared-memory path (collectives/shm/): forced with set_algorithm_override, it must give
// the bits the point-to-point algorithm gives (the direct exchange for all_reduce, which sums
// in the same rank order; pairwise for all_to_all_single), for every dtype and reduction, with
// GroupImpl::runs showing that shm ran. Only where the group's ranks share a host: the
// mpiexec and UCX suites run these cases (each rank a process); on the local transport forcing
// shm is refused, clearly. Every rank checks at the end that it left no segment name in
// /dev/shm.
#include "checks.h"
#include "shm_checks.h"
#include "spmd_case.h"

#include <ferry/collectives/engine/group_impl.h>
#include <ferry/collectives/shm/peer_arenas.h>
#include <ferry/collectives/shm/shared_segment.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>

#include <unistd.h>
#include <string>
#include <vector>

using namespace ftest;

namespace {

using ferry::Algorithm;
using ferry::Collective;

// all_reduce of `input` forced to `algo`, on a fresh output.
Tensor reduced(const Group& g, const Tensor& input, ReduceOp op, const char* algo) {
  ScopedAlgorithm o(std::string("all_reduce:") + algo);
  Tensor out = ferry::empty(input.shape(), input.dtype());
  ferry::all_reduce(input, out, g, op).wait();
  return out;
}

void all_reduce_matches_direct(Group& world, Ctx& ctx) {
  Group g = world.split(0, world.rank());  // its own segment, made by the first op
  const std::vector<DType> dtypes = {DType::Float32, DType::Float64, DType::Int32,
                                     DType::Int64,   DType::Float16, DType::BFloat16};
  for (DType dt : dtypes) {
    for (ReduceOp op : ops_for(dt)) {
      // Up to the slots' 16 KiB in the reduction's dtype (16-bit floats reduce in float32),
      // then above them (single copy from the peers' buffers, in slices; odd counts leave
      // uneven slices).
      const int64_t fill = 16384 / static_cast<int64_t>(std::max<size_t>(4, ferry::dtype_size(dt)));
      // 1 and 2 elements: at most 8 bytes, carried on the slot's counter line (kSmallBytes).
      for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{37}, fill, fill + 1,
                        int64_t{70001}}) {
        Gen gen(pattern_for(op), dt, g.rank(), static_cast<uint64_t>(n * 131));
        Tensor in = make_tensor(gen, {n}, dt);
        const Tensor before = snapshot(in);
        const uint64_t ran = runs(g, Collective::AllReduce, Algorithm::SharedMemory);
        Tensor by_shm = reduced(g, in, op, "shm");
        Tensor by_direct = reduced(g, in, op, "direct");
        const std::string w = where(g, shape_string({n})) + " " + ferry::dtype_name(dt);
        ctx.expect(same_bytes(by_shm, by_direct), [&] { return w + ": shm and direct differ"; });
        ctx.expect_unchanged(w + " input", in, before);
        ctx.expect(runs(g, Collective::AllReduce, Algorithm::SharedMemory) == ran + 1,
                   [&] { return w + ": shm did not run"; });
      }
    }
  }
  // In place, and many ops in flight at once, waited for in reverse (more than the segment's
  // depth: a rank that runs ahead waits for the buffers its peers still read). 2 float32 go on
  // the counter line, 5 through the data buffers.
  ScopedAlgorithm o("all_reduce:shm");
  const int W = g.size();
  for (int64_t len : {int64_t{2}, int64_t{5}}) {
    std::vector<Tensor> ts;
    std::vector<Work> works;
    for (int k = 0; k < 11; ++k) {
      ts.push_back(ferry::full({len}, static_cast<double>(k + g.rank())));
      works.push_back(ferry::all_reduce(ts.back(), g));
    }
    for (int k = 10; k >= 0; --k) works[k].wait();
    for (int k = 0; k < 11; ++k) {
      const double want = W * k + W * (W - 1) / 2.0;
      ctx.expect(ts[k].get_flat(0) == want && ts[k].get_flat(len - 1) == want, [&] {
        return where(g, "in flight " + std::to_string(k) + " of " + std::to_string(len)) +
               ": expected " + std::to_string(want) + ", given " +
               std::to_string(ts[k].get_flat(len - 1));
      });
    }
  }
  // Larger than the slots, in place, several in flight: the single copy reads the peers'
  // buffers until every rank is done with them.
  std::vector<Tensor> bigs;
  std::vector<Work> big_works;
  for (int k = 0; k < 3; ++k) {
    bigs.push_back(ferry::full({300001}, static_cast<double>(k + g.rank())));
    big_works.push_back(ferry::all_reduce(bigs.back(), g));
  }
  for (int k = 2; k >= 0; --k) big_works[k].wait();
  for (int k = 0; k < 3; ++k) {
    const double want = W * k + W * (W - 1) / 2.0;
    ctx.expect(bigs[k].get_flat(0) == want && bigs[k].get_flat(150000) == want &&
                   bigs[k].get_flat(300000) == want,
               [&] { return where(g, "large in place " + std::to_string(k)) + ": wrong sum"; });
  }
}

// A large all_reduce writes its output with ordinary or streaming stores, whichever has been
// faster lately (collectives/shm/store_chooser.h): its first op of a size and form with the
// one, its second with the other, then a try of the other now and then. Both give the direct
// exchange's bits, in place and out of place, and the streamed bytes show both ran.
void all_reduce_either_stores(Group& world, Ctx& ctx) {
  Group g = world.split(0, world.rank());  // its own choices, made afresh
  constexpr int64_t kCount = 70001;        // 273 KiB of float32: above the slots
  for (bool in_place : {false, true}) {
    const uint64_t streamed = ferry::detail::shm::single_copy_bytes().streamed;
    for (int k = 0; k < 6; ++k) {
      Gen gen(pattern_for(ReduceOp::Sum), DType::Float32, g.rank(), static_cast<uint64_t>(k));
      Tensor in = make_tensor(gen, {kCount}, DType::Float32);
      Tensor by_direct = reduced(g, in, ReduceOp::Sum, "direct");
      Tensor by_shm = in_place ? snapshot(in) : reduced(g, in, ReduceOp::Sum, "shm");
      if (in_place) {
        ScopedAlgorithm o("all_reduce:shm");
        ferry::all_reduce(by_shm, g).wait();
      }
      ctx.expect(same_bytes(by_shm, by_direct), [&] {
        return where(g, in_place ? "in place" : "out of place") + " op " + std::to_string(k) +
               ": shm and direct differ";
      });
    }
    // The second op streamed this rank's slice at least (in place, the peers' too).
    const uint64_t slice = kCount / static_cast<uint64_t>(g.size()) * 4;
    const uint64_t now = ferry::detail::shm::single_copy_bytes().streamed - streamed;
    ctx.expect(now >= slice, [&] {
      return where(g, in_place ? "in place" : "out of place") + ": " + std::to_string(now) +
             " B streamed, expected " + std::to_string(slice) + " at least";
    });
  }
}

void barrier_runs_in_shm(Group& world, Ctx& ctx) {
  Group g = world.split(0, world.rank());
  ScopedAlgorithm o("barrier:shm");
  const uint64_t ran = runs(g, Collective::Barrier, Algorithm::SharedMemory);
  for (int k = 0; k < 20; ++k) ferry::barrier(g).wait();
  std::vector<Work> ws;
  for (int k = 0; k < 9; ++k) ws.push_back(ferry::barrier(g));
  for (auto& w : ws) w.wait();
  ctx.expect(runs(g, Collective::Barrier, Algorithm::SharedMemory) == ran + 29,
             [&] { return where(g, "barrier") + ": shm did not run 29 times"; });
}

// all_to_all_single forced to `algo`, equal blocks (empty lists) or the given splits.
Tensor exchanged(const Group& g, const Tensor& in, int64_t out_rows,
                 const std::vector<int64_t>& out_splits, const std::vector<int64_t>& in_splits,
                 const char* algo) {
  ScopedAlgorithm o(std::string("all_to_all:") + algo);
  Shape shape = in.shape();
  shape[0] = out_rows;
  Tensor out = ferry::zeros(shape, in.dtype());
  ferry::all_to_all_single(in, out, out_splits, in_splits, g).wait();
  return out;
}

void all_to_all_matches_pairwise(Group& world, Ctx& ctx) {
  Group g = world.split(0, world.rank());
  const int W = g.size(), me = g.rank();
  for (int64_t inner : {int64_t{3}, int64_t{4096}}) {
    for (uint64_t salt : {1u, 2u}) {
      // Equal blocks, then split sizes (a2a_rows: rows from each rank to each, 0 among them).
      Gen gen(pattern_for(ReduceOp::Sum), DType::Float32, me, salt * 7 + inner);
      Tensor in_eq = make_tensor(gen, {2 * W, inner}, DType::Float32);
      std::vector<int64_t> in_splits(W), out_splits(W);
      for (int q = 0; q < W; ++q) {
        in_splits[q] = a2a_rows(W, 3, me, q, salt);
        out_splits[q] = a2a_rows(W, 3, q, me, salt);
      }
      Tensor in_v = make_tensor(gen, {sum_of(in_splits), inner}, DType::Float32);
      const uint64_t ran = runs(g, Collective::AllToAll, Algorithm::SharedMemory);
      const uint64_t pw = runs(g, Collective::AllToAll, Algorithm::Pairwise);
      Tensor a = exchanged(g, in_eq, 2 * W, {}, {}, "shm");
      Tensor b = exchanged(g, in_eq, 2 * W, {}, {}, "pairwise");
      Tensor c = exchanged(g, in_v, sum_of(out_splits), out_splits, in_splits, "shm");
      Tensor d = exchanged(g, in_v, sum_of(out_splits), out_splits, in_splits, "pairwise");
      const std::string w = where(g, "inner " + std::to_string(inner));
      ctx.expect(same_bytes(a, b), [&] { return w + ": equal blocks differ from pairwise"; });
      ctx.expect(same_bytes(c, d), [&] { return w + ": split sizes differ from pairwise"; });
      // Single copy where the ranks may read each other; the pairwise exchange where not.
      const uint64_t by_shm = runs(g, Collective::AllToAll, Algorithm::SharedMemory) - ran;
      const uint64_t by_pw = runs(g, Collective::AllToAll, Algorithm::Pairwise) - pw;
      ctx.expect(by_shm + by_pw == 4 && by_shm != 1 && by_shm != 3, [&] {
        return w + ": expected shm to run twice (or the fallback), given shm " +
               std::to_string(by_shm) + ", pairwise " + std::to_string(by_pw);
      });
    }
  }
}

// No name of this process's segments is left in /dev/shm (each is removed as soon as every
// rank mapped it).
void no_names_left(Group& world, Ctx& ctx) {
  Group g = world.split(0, world.rank());
  ScopedAlgorithm o("barrier:shm");
  ferry::barrier(g).wait();  // a fresh segment
  ctx.expect(!ferry::detail::shm::SharedSegment::names_left_in_dev_shm(getpid()),
             [&] { return where(g, "/dev/shm") + ": a ferry-shm segment name is left"; });
}

bool add(const char* name, void (*body)(Group&, Ctx&)) {
  return register_spmd_case(name, "[shm]", body, not_one_host);
}

// After every case of an mpiexec or UCX suite: nothing of this process is left in /dev/shm.
[[maybe_unused]] const bool final_check = spmd::add_final_check([](Group&) -> std::string {
  if (ferry::detail::shm::SharedSegment::names_left_in_dev_shm(getpid()))
    return "a ferry-shm segment name of this process is left in /dev/shm after the suite";
  return "";
});

[[maybe_unused]] const bool registered =
    add("shm: all_reduce equals the direct exchange, every dtype and reduction",
        all_reduce_matches_direct) &&
    add("shm: a large all_reduce by ordinary and streaming stores equals the direct exchange",
        all_reduce_either_stores) &&
    add("shm: barrier", barrier_runs_in_shm) &&
    add("shm: all_to_all_single equals pairwise, equal blocks and split sizes",
        all_to_all_matches_pairwise) &&
    add("shm: no segment name left in /dev/shm", no_names_left);

}  // namespace

TEST_CASE("shm: forcing shared memory where the transport cannot tell hosts is refused",
          "[shm]") {
  ScopedAlgorithm o("all_reduce:shm");
  run_checked(2, [](Group& g, Ctx& ctx) {
    Tensor t = ferry::full({4}, 1.0);
    try {
      ferry::all_reduce(t, g).wait();
      ctx.fail(where(g, "local") + ": forced shm ran on the local transport");
    } catch (const ferry::InvalidArgument& e) {
      const std::string msg = e.what();
      ctx.expect(msg.find("all_reduce:shm") != std::string::npos &&
                     msg.find("one host") != std::string::npos,
                 [&] { return "unclear refusal: " + msg; });
    }
    ctx.expect(!g.poisoned(), [&] { return where(g, "local") + ": the refusal poisoned"; });
  });
}
