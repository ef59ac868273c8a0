// torchrec planner and the bandwidth between hosts: the plan it prefers flips from row_wise to
// table_row_wise as the cross-node bandwidth falls (the cost model's figures by hand), the printed
// cross-node traffic, and where the bandwidths come from when nothing is measured.
#include <ferry/collectives/run_ranks.h>
#include <ferry/collectives/torchrec/torchrec.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

using namespace ferry;
using namespace ferry::torchrec;
using Catch::Matchers::Contains;

namespace {

// 2 nodes of 2 ranks, batch 1 (G = 4), e = 4, i = 8, intra-node 100 GB/s, lookups 20 GB/s.
Topology two_nodes(double cross_node_bandwidth) {
  Topology t;
  t.world_size = 4;
  t.local_world_size = 2;
  t.batch_size = 1;
  t.memory_budget = 1 << 20;
  t.intra_node_bandwidth = 100e9;
  t.lookup_bandwidth = 20e9;
  t.cross_node_bandwidth = cross_node_bandwidth;
  return t;
}

// One table of 1000 rows x 16, one id per bag, that may go row_wise or table_row_wise only.
PlannerTable rows_table() {
  // Built whole: GCC 12 at -O3 warns falsely (-Wstringop-overflow) on `t.name = "t"`.
  PlannerTable t{"t", 1000, 16, 1.0, 1, {}};
  t.constraints.sharding_types = {ShardingType::ROW_WISE, ShardingType::TABLE_ROW_WISE};
  return t;
}

double busiest(const std::vector<RankCost>& cost) {
  double m = 0;
  for (const RankCost& c : cost) m = std::max(m, c.seconds);
  return m;
}

ShardingType chosen(const Topology& t) {
  const ShardingPlan plan = EmbeddingShardingPlanner(t).plan({rows_table()});
  return plan.get_plan_for_module("").value().at("t").sharding_type;
}

}  // namespace

TEST_CASE("torchrec planner: a slower link between hosts flips the plan to keep traffic inside "
          "them", "[torchrec][planner]") {
  const PlannerTable tab = rows_table();
  const ParameterSharding rw = row_wise()(tab.shape(), 4, 2);
  const ParameterSharding twrw = table_row_wise(0)(tab.shape(), 4, 2);
  // row_wise, every rank, all of it across nodes: B*p*i + G*p*i/4 + 4*G*D*e = 8 + 8 + 1024
  // bytes; lookups G*p*D/4 = 16 values, 16 * 4 * 2 bytes at 20 GB/s = 6.4 ns.
  // table_row_wise on node 0, each owner: across nodes B*p*i + 2*B*D*e + G*p*i/2 + 2*G*D*e/L =
  // 8 + 128 + 16 + 256 = 408 bytes, inside the node 4*G*D*e = 1024 bytes (10.24 ns at 100 GB/s);
  // lookups 32 values, 12.8 ns. Equal at 632 / X = 16.64 ns: X = 38 GB/s.
  for (double cross : {100e9, 12.5e9, 1.25e9}) {
    const Topology t = two_nodes(cross);
    const double rw_ns = 1040 / cross * 1e9 + 6.4;
    const double twrw_ns = 408 / cross * 1e9 + 10.24 + 12.8;
    CHECK(busiest(estimate_table_cost(rw, tab, t)) * 1e9 == Approx(rw_ns));
    CHECK(busiest(estimate_table_cost(twrw, tab, t)) * 1e9 == Approx(twrw_ns));
  }
  // As fast across hosts as inside one (100 GB/s): row_wise, whose lookups four ranks share.
  CHECK(chosen(two_nodes(100e9)) == ShardingType::ROW_WISE);
  // The default 12.5 GB/s, and a 10 Gbit/s link measured at 1.25 GB/s: table_row_wise, whose
  // partial sums stay inside node 0.
  CHECK(chosen(two_nodes(12.5e9)) == ShardingType::TABLE_ROW_WISE);
  CHECK(chosen(two_nodes(1.25e9)) == ShardingType::TABLE_ROW_WISE);
  // The same through HostBandwidths: given 100 GB/s across, row_wise again.
  Topology given = two_nodes(1.25e9);
  given_cross_host_bandwidth(100e9).apply_to(given);
  CHECK(given.cross_node_bandwidth == 100e9);
  CHECK(given.intra_node_bandwidth == Topology{}.intra_node_bandwidth);
  CHECK(chosen(given) == ShardingType::ROW_WISE);
}

TEST_CASE("torchrec planner: the printed plan gives the bytes that cross nodes per step",
          "[torchrec][planner]") {
  const Topology t = two_nodes(1.25e9);
  const std::vector<PlannerTable> tables{rows_table()};
  const ShardingPlan plan = EmbeddingShardingPlanner(t).plan(tables);
  const std::string text = format_plan(plan, {{"", tables}}, t);
  INFO(text);
  // table_row_wise on node 0: 408 bytes on each owner, 8 + 128 = 136 on ranks 2 and 3.
  CHECK_THAT(text, Contains("cross-node traffic per step: 1.06 KiB (sent plus received, summed "
                            "over the ranks; rank 0 408 B), priced at 1.25 GB/s across nodes and "
                            "100 GB/s inside one"));
  Topology one = t;
  one.local_world_size = 4;
  CHECK_THAT(format_plan(EmbeddingShardingPlanner(one).plan(tables), {{"", tables}}, one),
             Contains("one node: no byte crosses nodes (intra-node bandwidth 100 GB/s)"));
}

TEST_CASE("torchrec host bandwidths: given, defaults, and nothing measured on one host",
          "[torchrec][planner]") {
  CHECK(format_bandwidth(1.25e9) == "1.25 GB/s");
  CHECK(format_bandwidth(850e6) == "850 MB/s");
  CHECK(format_bandwidth(12.5e9) == "12.5 GB/s");
  const HostBandwidths given = given_cross_host_bandwidth(1.25e9);
  CHECK(given.cross_source == BandwidthSource::Given);
  CHECK(given.intra_source == BandwidthSource::Default);
  CHECK_THAT(given.describe(), Contains("cross-host bandwidth 1.25 GB/s (given), intra-host "
                                        "100 GB/s (default)"));
  CHECK_THROWS_WITH(given_cross_host_bandwidth(0), Contains("given 0"));
  CHECK_THROWS_WITH(given_cross_host_bandwidth(-1), Contains("given -1"));

  // The local transport's ranks are threads of one host: the defaults, no collective.
  std::vector<HostBandwidths> seen(2);
  std::vector<uint64_t> sequence(2);
  run_ranks(2, [&](Group& world) {
    seen[static_cast<size_t>(world.rank())] = measure_host_bandwidths(world);
    sequence[static_cast<size_t>(world.rank())] = world.sequence_number();
  });
  for (size_t r = 0; r < 2; ++r) {
    CHECK(seen[r].cross_source == BandwidthSource::Default);
    CHECK(seen[r].cross_host == Topology{}.cross_node_bandwidth);
    CHECK(seen[r].intra_host == Topology{}.intra_node_bandwidth);
    CHECK_THAT(seen[r].describe(), Contains("(default)"));
    CHECK_THAT(seen[r].note, Contains("not measured"));
    CHECK(sequence[r] == 0);
  }
  // Bad options are refused before anything moves.
  std::string refusal;
  run_ranks(1, [&](Group& world) {
    BandwidthProbeOptions o;
    o.rounds = 0;
    try {
      measure_host_bandwidths(world, o);
    } catch (const InvalidArgument& e) {
      refusal = e.what();
    }
  });
  CHECK_THAT(refusal, Contains("rounds 0"));
}
