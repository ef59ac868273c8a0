// The hierarchical all_reduce, reduce_scatter and all_gather on local worlds whose ranks are
// given a simulated host layout:
// the local transport learns no host keys (its ranks are threads of one process), so each rank
// thread hands its transport the keys init's handshake would have exchanged
// (Transport::set_host_keys), one key per simulated host. The table must then choose the
// hierarchical algorithm for the sizes it says (and an override must replace it), every form
// of all_reduce must give the reference's values on even (2 + 2), uneven (3 + 1, 2 + 3),
// interleaved (hosts 0,1,0,1) and three-host layouts, down to payloads smaller than a host's
// ranks, and every rank must end with the same bits of a float sum whose additions' order
// matters, the same from run to run. reduce_scatter and all_gather: chosen for every size on
// shared hosts, every form giving the reference's values on those layouts and on one host, and
// a float reduce_scatter's bits those of the documented order (each host's ranks folded in rank
// order, then the hosts in host order). One case of each also runs on the MPI and UCX worlds
// (tests/mpi, and across simulated hosts in tests/hosts): there the hosts are the job's own.
#include "checks.h"
#include "spmd_case.h"

#include <ferry/collectives/algorithm_table.h>
#include <ferry/collectives/engine/group_impl.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

using namespace ftest;

namespace {

using ferry::Algorithm;
using ferry::Collective;
using ferry::Placement;

// Every rank's transport learns `keys` (by world rank): equal keys, one simulated host.
void simulate_hosts(Group& g, const std::vector<uint64_t>& keys) {
  g.transport().set_host_keys(keys);
}

std::string layout_text(const std::vector<uint64_t>& keys) {
  std::string s;
  for (uint64_t k : keys) {
    if (!s.empty()) s.push_back(',');
    s.append(std::to_string(k));
  }
  return "hosts by rank " + s;
}

const std::vector<std::vector<uint64_t>> kLayouts = {
    {1, 1, 2, 2}, {1, 1, 1, 2}, {1, 2, 1, 2}, {1, 1, 2, 2, 2}, {1, 1, 2, 2, 3, 3}};

// `body` on every layout of `layouts`, each rank's transport given the layout's keys first.
void on_every_layout(const std::function<void(Group&, Ctx&)>& body,
                     const std::vector<std::vector<uint64_t>>& layouts = kLayouts) {
  for (const auto& keys : layouts) {
    INFO(layout_text(keys));
    run_checked(static_cast<int>(keys.size()), [&keys, &body](Group& g, Ctx& ctx) {
      simulate_hosts(g, keys);
      body(g, ctx);
    });
  }
}

uint64_t hierarchical_runs(const Group& g) {
  return g.impl().runs(Collective::AllReduce, Algorithm::Hierarchical);
}

// One all_reduce checked against the reference; `expect` says which algorithm must have run.
void check_all_reduce(Ctx& ctx, const Group& g, const OpCase& c, Algorithm expect) {
  const uint64_t before = g.impl().runs(Collective::AllReduce, expect);
  run_case(ctx, g, start_all_reduce, c);
  FT_CHECK(ctx, g.impl().runs(Collective::AllReduce, expect) == before + 1,
           where(g, c.describe("all_reduce")) + ": expected " + ferry::algorithm_name(expect));
}

OpCase reduce_case(DType dtype, int64_t rows, ReduceOp op, int variant, uint64_t salt) {
  OpCase c;
  c.dtype = dtype;
  c.rows = rows;
  c.op = op;
  c.variant = variant;
  c.salt = salt;
  return c;
}

// Floats whose sum depends on the order of the additions: magnitudes from 1e-3 to 1e5.
Tensor order_sensitive(int rank, int64_t n) {
  Tensor t = ferry::empty({n}, DType::Float32);
  float* v = t.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t h = mix64(static_cast<uint64_t>(rank) * 1000003u + static_cast<uint64_t>(i));
    const double unit = static_cast<double>(h >> 11) / 9007199254740992.0;  // [0, 1)
    v[i] = static_cast<float>((unit - 0.5) * std::pow(10.0, static_cast<double>(h % 9) - 3.0));
  }
  return t;
}

// all_reduce of order-sensitive floats; every rank's result must hold the same bits (checked
// through an all_gather of the results) and be near the sum in double.
std::vector<float> identical_bits(Ctx& ctx, Group& g, int64_t n) {
  const int W = g.size();
  Tensor x = order_sensitive(g.rank(), n);
  ferry::all_reduce(x, g).wait();
  Tensor all = ferry::empty({W * n}, DType::Float32);
  ferry::all_gather(x, all, g).wait();
  const float* mine = x.data<float>();
  for (int k = 0; k < W; ++k) {
    const bool same =
        std::memcmp(all.data<float>() + k * n, mine, static_cast<size_t>(n) * sizeof(float)) == 0;
    FT_CHECK(ctx, same, where(g, "all_reduce of " + std::to_string(n) +
                                     " floats: the bits of rank " + std::to_string(k)));
  }
  std::vector<double> sum(static_cast<size_t>(n), 0.0);
  for (int k = 0; k < W; ++k) {
    const Tensor theirs = order_sensitive(k, n);
    for (int64_t i = 0; i < n; ++i) sum[i] += static_cast<double>(theirs.data<float>()[i]);
  }
  int64_t far = 0;  // float32 sums of W terms below 1e5: within W ulps of 1e5
  for (int64_t i = 0; i < n; ++i) far += std::fabs(mine[i] - sum[i]) > 0.01 * W ? 1 : 0;
  FT_CHECK(ctx, far == 0, where(g, std::to_string(far) + " elements far from the sum"));
  return std::vector<float>(mine, mine + n);
}

}  // namespace

TEST_CASE("hierarchical all_reduce: the table's row for ranks on shared hosts",
          "[algorithms][hierarchical]") {
  ferry::set_algorithm_override("");
  using A = Algorithm;
  const auto choose = [](size_t bytes, int world, bool native, Placement p) {
    return ferry::choose_algorithm(Collective::AllReduce, bytes, world, native, p);
  };
  // Above the small-payload rows, ranks on several hosts some of which hold several ranks.
  CHECK(choose(64 << 10, 4, false, Placement::SharedHosts) == A::Hierarchical);
  CHECK(choose(16 << 20, 16, false, Placement::SharedHosts) == A::Hierarchical);
  CHECK(choose(8, 4, false, Placement::SharedHosts) == A::Direct);
  // One rank per host, unknown hosts, one host: as before.
  CHECK(choose(64 << 10, 4, false, Placement::ApartHosts) == A::Ring);
  CHECK(choose(64 << 10, 4, false, Placement::Unknown) == A::Ring);
  CHECK(choose(64 << 10, 4, false, Placement::OneHost) == A::SharedMemory);
  // An override forces it, or another algorithm in its place.
  {
    ScopedAlgorithm o("all_reduce:hierarchical");
    CHECK(choose(8, 4, false, Placement::Unknown) == A::Hierarchical);
    CHECK(choose(8, 4, true, Placement::OneHost) == A::Hierarchical);
  }
  {
    ScopedAlgorithm o("all_reduce:ring");
    CHECK(choose(64 << 10, 4, false, Placement::SharedHosts) == A::Ring);
  }
  CHECK(ferry::algorithm_table().find("hierarchical if ranks on several hosts") !=
        std::string::npos);
}

TEST_CASE("hierarchical all_reduce: chosen and exact on simulated hosts",
          "[algorithms][hierarchical]") {
  ferry::set_algorithm_override("");
  on_every_layout([](Group& g, Ctx& ctx) {
    FT_CHECK(ctx, g.impl().placement() == Placement::SharedHosts, where(g, "placement"));
    // 64 KiB and an odd count above the small-payload rows: the automatic choice.
    for (int64_t rows : {int64_t{16384}, int64_t{20011}})
      check_all_reduce(ctx, g, reduce_case(DType::Float32, rows, ReduceOp::Sum, 0, 1),
                       Algorithm::Hierarchical);
    check_all_reduce(ctx, g, reduce_case(DType::Int64, 9001, ReduceOp::Max, 1, 2),
                     Algorithm::Hierarchical);
    check_all_reduce(ctx, g, reduce_case(DType::Float16, 20000, ReduceOp::Avg, 2, 3),
                     Algorithm::Hierarchical);
    // A small payload keeps the direct exchange.
    check_all_reduce(ctx, g, reduce_case(DType::Float32, 37, ReduceOp::Sum, 0, 4),
                     Algorithm::Direct);
  });
}

TEST_CASE("hierarchical all_reduce: forced, every size down to fewer elements than ranks",
          "[algorithms][hierarchical]") {
  ScopedAlgorithm o("all_reduce:hierarchical");
  on_every_layout([](Group& g, Ctx& ctx) {
    uint64_t salt = 10;
    for (int64_t rows : {int64_t{0}, int64_t{1}, int64_t{3}, int64_t{37}, int64_t{5000}})
      for (int variant : {0, 1, 2})
        check_all_reduce(ctx, g, reduce_case(DType::Float32, rows, ReduceOp::Sum, variant,
                                             ++salt),
                         Algorithm::Hierarchical);
    check_all_reduce(ctx, g, reduce_case(DType::Int32, 777, ReduceOp::Min, 0, ++salt),
                     Algorithm::Hierarchical);
  });
}

TEST_CASE("hierarchical all_reduce: every rank gets the same bits, run after run",
          "[algorithms][hierarchical]") {
  ferry::set_algorithm_override("");
  on_every_layout([](Group& g, Ctx& ctx) {
    // 64 KiB (recursive doubling across the hosts) and 200 KiB (the ring across them).
    for (int64_t n : {int64_t{16396}, int64_t{50001}}) {
      const uint64_t before = hierarchical_runs(g);
      const std::vector<float> first = identical_bits(ctx, g, n);
      const std::vector<float> again = identical_bits(ctx, g, n);
      FT_CHECK(ctx, hierarchical_runs(g) == before + 2, where(g, "hierarchical ran"));
      FT_CHECK(ctx, std::memcmp(first.data(), again.data(), first.size() * sizeof(float)) == 0,
               where(g, "the same bits on the second run"));
    }
  });
  // 4 KB, forced: the direct exchange across the hosts (three of them in the last layout).
  ScopedAlgorithm o("all_reduce:hierarchical");
  on_every_layout([](Group& g, Ctx& ctx) {
    (void)identical_bits(ctx, g, 1001);
  });
}

// On the job's own hosts (the MPI and UCX suites, and across simulated hosts in tests/hosts):
// the automatic choice ran, and it is the hierarchical algorithm wherever the ranks share hosts
// and the transport has no collectives of its own; forced, it gives every rank the same bits.
FT_SPMD_CASE("hierarchical all_reduce: on the hosts the job runs on", "[algorithms][hierarchical]",
             1, 3) {
  const ferry::detail::GroupImpl& impl = g.impl();
  const bool native = impl.native() != nullptr;
  const Placement placement = impl.placement();
  const OpCase c = reduce_case(DType::Float32, 65536, ReduceOp::Sum, 1, 21);  // 256 KiB
  const Algorithm want = ferry::choose_algorithm(Collective::AllReduce, 65536 * 4, g.size(),
                                                 native, placement);
  if (placement == Placement::SharedHosts && !native)
    FT_CHECK(ctx, want == Algorithm::Hierarchical, where(g, "the table's choice"));
  uint64_t before = 0;  // the transport's own ways count as one: it may fall to the next
  auto ran = [&] {
    uint64_t n = 0;
    for (size_t a = 0; a < ferry::kAlgorithmCount; ++a) {
      const auto algo = static_cast<Algorithm>(a);
      if (algo == want || (ferry::uses_native_collectives(want) &&
                           ferry::uses_native_collectives(algo)))
        n += impl.runs(Collective::AllReduce, algo);
    }
    return n;
  };
  before = ran();
  run_case(ctx, g, start_all_reduce, c);
  FT_CHECK(ctx, ran() == before + 1,
           where(g, std::string("all_reduce of 256 KiB ran ") + ferry::algorithm_name(want)));
  // Local worlds share one override: every rank is past its automatic op before it is set, and
  // past its forced ones before it is cleared.
  ferry::barrier(g).wait();
  ScopedAlgorithm forced("all_reduce:hierarchical");
  ferry::barrier(g).wait();
  before = hierarchical_runs(g);
  const std::vector<float> first = identical_bits(ctx, g, 50001);
  FT_CHECK(ctx, identical_bits(ctx, g, 50001) == first, where(g, "the same bits again"));
  run_case(ctx, g, start_all_reduce, reduce_case(DType::Int64, 3001, ReduceOp::Sum, 2, 22));
  FT_CHECK(ctx, hierarchical_runs(g) == before + 3, where(g, "forced: hierarchical ran"));
  ferry::barrier(g).wait();
}

// ---- reduce_scatter and all_gather ----

namespace {

// One op checked against the reference; `expect` must have run it.
void check_ran(Ctx& ctx, const Group& g, Collective c, Starter start, const OpCase& op,
               Algorithm expect) {
  const uint64_t before = g.impl().runs(c, expect);
  run_case(ctx, g, start, op);
  FT_CHECK(ctx, g.impl().runs(c, expect) == before + 1,
           where(g, op.describe(ferry::collective_name(c))) + ": expected " +
               ferry::algorithm_name(expect));
}

// Every form of reduce_scatter and all_gather, `rows` a scale of their blocks.
void every_form(Ctx& ctx, const Group& g, int64_t rows, uint64_t salt, Algorithm expect) {
  const Collective rs = Collective::ReduceScatter, ag = Collective::AllGather;
  for (int variant : {0, 1}) {
    check_ran(ctx, g, rs, start_reduce_scatter,
              reduce_case(DType::Float32, rows, ReduceOp::Sum, variant, ++salt), expect);
    check_ran(ctx, g, rs, start_reduce_scatter_v,
              reduce_case(DType::Int64, rows, ReduceOp::Max, variant, ++salt), expect);
    check_ran(ctx, g, ag, start_all_gather,
              reduce_case(DType::Float64, rows, ReduceOp::Sum, variant, ++salt), expect);
  }
  check_ran(ctx, g, rs, start_reduce_scatter,
            reduce_case(DType::Float16, rows, ReduceOp::Avg, 0, ++salt), expect);
  check_ran(ctx, g, ag, start_all_gather_v,
            reduce_case(DType::Int32, rows, ReduceOp::Sum, 0, ++salt), expect);
  check_ran(ctx, g, ag, start_all_gather_v_exchanged,
            reduce_case(DType::UInt8, rows, ReduceOp::Sum, 0, ++salt), expect);
}

// Host index by rank, hosts numbered by their lowest rank, as Group::host_layout numbers them.
std::vector<int> hosts_by_rank(const std::vector<uint64_t>& keys) {
  std::vector<uint64_t> seen;
  std::vector<int> host;
  for (uint64_t k : keys) {
    const auto at = std::find(seen.begin(), seen.end(), k);
    host.push_back(static_cast<int>(at - seen.begin()));
    if (at == seen.end()) seen.push_back(k);
  }
  return host;
}

// The documented order of a hierarchical reduce_scatter's float sum for block `t` of `m`
// elements: each host's ranks folded in rank order, then the hosts' sums in host order.
std::vector<float> documented_sum(const std::vector<uint64_t>& keys, int t, int64_t m) {
  const std::vector<int> host = hosts_by_rank(keys);
  const int W = static_cast<int>(keys.size());
  const int hosts = *std::max_element(host.begin(), host.end()) + 1;
  std::vector<Tensor> in;
  for (int r = 0; r < W; ++r) in.push_back(order_sensitive(r, W * m));
  std::vector<float> total(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) {
    float acc = 0;
    for (int h = 0; h < hosts; ++h) {
      bool first = true;
      float part = 0;
      for (int r = 0; r < W; ++r) {
        if (host[static_cast<size_t>(r)] != h) continue;
        const float v = in[static_cast<size_t>(r)].data<float>()[t * m + i];
        part = first ? v : part + v;
        first = false;
      }
      acc = h == 0 ? part : acc + part;
    }
    total[static_cast<size_t>(i)] = acc;
  }
  return total;
}

}  // namespace

TEST_CASE("hierarchical reduce_scatter and all_gather: the table's rows",
          "[algorithms][hierarchical]") {
  ferry::set_algorithm_override("");
  using A = Algorithm;
  for (Collective c : {Collective::ReduceScatter, Collective::AllGather}) {
    INFO(ferry::collective_name(c));
    const auto choose = [c](size_t bytes, int world, bool native, Placement p) {
      return ferry::choose_algorithm(c, bytes, world, native, p);
    };
    // Every size, on several hosts some of which hold several ranks, without MPI's collectives.
    CHECK(choose(8, 4, false, Placement::SharedHosts) == A::Hierarchical);
    CHECK(choose(16 << 20, 16, false, Placement::SharedHosts) == A::Hierarchical);
    CHECK(choose(1 << 20, 4, true, Placement::SharedHosts) != A::Hierarchical);
    CHECK(choose(64 << 10, 4, false, Placement::ApartHosts) == A::Ring);
    CHECK(choose(64 << 10, 4, false, Placement::Unknown) == A::Ring);
    CHECK(choose(64 << 10, 4, false, Placement::OneHost) == A::SharedMemory);
  }
  {
    ScopedAlgorithm o("reduce_scatter:hierarchical,all_gather:hierarchical");
    CHECK(ferry::choose_algorithm(Collective::ReduceScatter, 8, 4, false, Placement::Unknown) ==
          A::Hierarchical);
    CHECK(ferry::choose_algorithm(Collective::AllGather, 8, 4, true, Placement::OneHost) ==
          A::Hierarchical);
  }
  const std::string table = ferry::algorithm_table();
  for (const char* row : {"\nreduce_scatter ", "\nall_gather "}) {
    const size_t at = table.find(row);
    REQUIRE(at != std::string::npos);
    CHECK(table.substr(at, table.find('\n', at + 1) - at)
              .find("hierarchical if ranks on several hosts") != std::string::npos);
  }
}

TEST_CASE("hierarchical reduce_scatter and all_gather: chosen, every form exact",
          "[algorithms][hierarchical]") {
  ferry::set_algorithm_override("");
  on_every_layout([](Group& g, Ctx& ctx) {
    // Blocks of a few elements and of 2-8 KiB, uneven ones with empty blocks among them.
    every_form(ctx, g, 3, 100, Algorithm::Hierarchical);
    every_form(ctx, g, 1031, 200, Algorithm::Hierarchical);
  });
  // Forced: on one host (no block crosses), and empty blocks everywhere.
  ScopedAlgorithm o("reduce_scatter:hierarchical,all_gather:hierarchical");
  on_every_layout([](Group& g, Ctx& ctx) { every_form(ctx, g, 257, 300, Algorithm::Hierarchical); },
                  {{1, 1, 1}, {1, 1, 2, 2}});
  on_every_layout([](Group& g, Ctx& ctx) { every_form(ctx, g, 0, 400, Algorithm::Hierarchical); },
                  {{1, 1, 1, 2}});
}

TEST_CASE("hierarchical reduce_scatter: the float sum's bits are the documented order's",
          "[algorithms][hierarchical]") {
  ferry::set_algorithm_override("");
  const int64_t m = 2000;
  std::vector<std::vector<uint64_t>> layouts = kLayouts;
  layouts.push_back({1, 1, 1});
  for (const auto& keys : layouts) {
    INFO(layout_text(keys));
    ScopedAlgorithm o("reduce_scatter:hierarchical");
    run_checked(static_cast<int>(keys.size()), [&keys, m](Group& g, Ctx& ctx) {
      simulate_hosts(g, keys);
      Tensor in = order_sensitive(g.rank(), g.size() * m);
      Tensor out = ferry::empty({m}, DType::Float32);
      ferry::reduce_scatter(in, out, g).wait();
      const std::vector<float> want = documented_sum(keys, g.rank(), m);
      int64_t differ = 0;
      for (int64_t i = 0; i < m; ++i)
        differ += std::memcmp(out.data<float>() + i, &want[static_cast<size_t>(i)], 4) != 0;
      FT_CHECK(ctx, differ == 0,
               where(g, std::to_string(differ) + " of " + std::to_string(m) +
                            " elements differ from the documented order's bits"));
    });
  }
}

// On the job's own hosts: the automatic choice is hierarchical wherever the ranks share hosts
// and the transport has no collectives of its own; every form exact when forced.
FT_SPMD_CASE("hierarchical reduce_scatter and all_gather: on the hosts the job runs on",
             "[algorithms][hierarchical]", 1, 3) {
  const bool shared = g.impl().placement() == Placement::SharedHosts;
  if (shared && g.impl().native() == nullptr) {
    for (Collective c : {Collective::ReduceScatter, Collective::AllGather})
      FT_CHECK(ctx, ferry::choose_algorithm(c, 1 << 20, g.size(), false, Placement::SharedHosts) ==
                        Algorithm::Hierarchical,
               where(g, std::string("the table's choice for ") + ferry::collective_name(c)));
  }
  ferry::barrier(g).wait();
  ScopedAlgorithm forced("reduce_scatter:hierarchical,all_gather:hierarchical");
  ferry::barrier(g).wait();
  every_form(ctx, g, 4099, 500, Algorithm::Hierarchical);
  ferry::barrier(g).wait();
}
