// The shared-memory path where the ranks cannot read each other's memory (Yama ptrace_scope, a
// container without CAP_SYS_PTRACE): this host allows the reads, so the group is made with the
// probe told to refuse them (set_peers_unreadable_for_testing). Every collective larger than a
// slot then takes its fallback — all_reduce, reduce, reduce_scatter and the gathers through the
// slots a piece at a time, all_to_all_single the pairwise exchange — and must still give the
// bytes the point-to-point algorithms give. Only where the ranks share a host.
#include "checks.h"
#include "shm_checks.h"
#include "spmd_case.h"

#include <ferry/collectives/engine/group_impl.h>
#include <ferry/collectives/shm/shm_group.h>

#include <catch2/catch.hpp>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

using namespace ftest;

namespace {

using ferry::Algorithm;
using ferry::Collective;

// `run` forced to shm and to `other` (a spec of the same collective), on fresh outputs: the
// same bytes on every rank, and shm recorded once for `c`.
void expect_same(Group& g, Ctx& ctx, const std::string& what, Collective c, const char* shm,
                 const char* other, const std::function<Tensor()>& run) {
  const uint64_t ran = g.impl().runs(c, Algorithm::SharedMemory);
  Tensor by_shm, by_other;
  {
    ScopedAlgorithm o(shm);
    by_shm = run();
  }
  {
    ScopedAlgorithm o(other);
    by_other = run();
  }
  const bool both_defined = by_shm.defined() && by_other.defined();
  ctx.expect(!both_defined || same_bytes(by_shm, by_other),
             [&] { return where(g, what) + ": shm's fallback and " + other + " differ"; });
  ctx.expect(g.impl().runs(c, Algorithm::SharedMemory) == ran + 1,
             [&] { return where(g, what) + ": shm did not run once"; });
}

void fallbacks_without_reads(Group& world, Ctx& ctx) {
  ferry::detail::shm::set_peers_unreadable_for_testing(true);
  Group g = world.split(0, world.rank());
  ferry::detail::shm::set_peers_unreadable_for_testing(false);
  const int W = g.size(), me = g.rank();
  const int64_t n = 70001;  // well above a slot, not a multiple of a piece
  Gen gen(pattern_for(ReduceOp::Sum), DType::Float32, me, 17);
  const Tensor in = make_tensor(gen, {n}, DType::Float32);
  const Tensor in_w = make_tensor(gen, {n * W}, DType::Float32);

  expect_same(g, ctx, "all_reduce", Collective::AllReduce, "all_reduce:shm", "all_reduce:ring",
              [&] {
                Tensor out = ferry::zeros({n});
                ferry::all_reduce(in, out, g).wait();
                return out;
              });
  expect_same(g, ctx, "all_gather", Collective::AllGather, "all_gather:shm", "all_gather:ring",
              [&] {
                Tensor out = ferry::zeros({n * W});
                ferry::all_gather(in, out, g).wait();
                return out;
              });
  // Rank 0 gives many rows, the others none or one: pieces of the largest block only.
  std::vector<int64_t> sizes(static_cast<size_t>(W), 1);
  sizes[0] = 9;
  if (W > 2) sizes[1] = 0;
  const Tensor rows = make_tensor(gen, {sizes[static_cast<size_t>(me)], 4096}, DType::Float32);
  expect_same(g, ctx, "all_gather_v", Collective::AllGather, "all_gather:shm", "all_gather:ring",
              [&] {
                Tensor out = ferry::zeros({sum_of(sizes), 4096});
                ferry::all_gather_v(rows, out, sizes, g).wait();
                return out;
              });
  for (int root : {0, W - 1}) {
    expect_same(g, ctx, "broadcast from " + std::to_string(root), Collective::Broadcast,
                "broadcast:shm", "broadcast:tree", [&] {
                  Tensor t = me == root ? snapshot(in) : ferry::zeros({n});
                  ferry::broadcast(t, root, g).wait();
                  return t;
                });
    expect_same(g, ctx, "reduce to " + std::to_string(root), Collective::Reduce, "reduce:shm",
                "reduce:tree", [&] {
                  Tensor out = ferry::full({n}, -7.0);
                  ferry::reduce(in, out, root, g).wait();
                  return me == root ? out : Tensor();
                });
  }
  expect_same(g, ctx, "reduce_scatter", Collective::ReduceScatter, "reduce_scatter:shm",
              "reduce_scatter:ring", [&] {
                Tensor out = ferry::zeros({n});
                ferry::reduce_scatter(in_w, out, g).wait();
                return out;
              });
  // The list form: its blocks put end to end for the fallback's one buffer.
  expect_same(g, ctx, "reduce_scatter list", Collective::ReduceScatter, "reduce_scatter:shm",
              "reduce_scatter:ring", [&] {
                std::vector<Tensor> parts;
                for (int r = 0; r < W; ++r) parts.push_back(snapshot(in_w.narrow(0, r * n, n)));
                Tensor out = ferry::zeros({n});
                ferry::reduce_scatter(parts, out, g).wait();
                return out;
              });
  // all_to_all_single takes the pairwise exchange instead, and records that.
  const uint64_t pairwise = g.impl().runs(Collective::AllToAll, Algorithm::Pairwise);
  Tensor a2a_out = ferry::zeros({n * W});
  {
    ScopedAlgorithm o("all_to_all:shm");
    ferry::all_to_all_single(in_w, a2a_out, g).wait();
  }
  ctx.expect(g.impl().runs(Collective::AllToAll, Algorithm::Pairwise) == pairwise + 1,
             [&] { return where(g, "all_to_all_single") + ": not the pairwise exchange"; });
}

[[maybe_unused]] const bool registered = register_spmd_case(
    "shm: without reading the peers' memory, every collective takes its fallback", "[shm]",
    fallbacks_without_reads, not_one_host);

}  // namespace
