// torchrec plan types: string values, hand-written plans of each sharding type (their exact shards,
// and an independent cell-coverage check that they tile the table), each validation error with its
// message, serialization, and the collective plan agreement check on the local transport. Rank
// bodies record; Catch2 checks on the main thread.
#include <ferry/collectives/run_ranks.h>
#include <ferry/collectives/torchrec/torchrec.h>
#include "../utils/env_guard.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

using namespace ferry;
using namespace ferry::torchrec;
using Catch::Matchers::Contains;

namespace {

using Shards = std::vector<ShardMetadata>;

// Every cell of the table covered exactly once by the shards (independent of the validator).
bool tiles_exactly(const ParameterSharding& p, const TableShape& t) {
  std::vector<int> cover(static_cast<size_t>(t.rows * t.dim), 0);
  for (const auto& s : p.sharding_spec) {
    for (int64_t r = s.shard_offsets[0]; r < s.shard_offsets[0] + s.shard_sizes[0]; ++r)
      for (int64_t c = s.shard_offsets[1]; c < s.shard_offsets[1] + s.shard_sizes[1]; ++c) {
        if (r < 0 || r >= t.rows || c < 0 || c >= t.dim) return false;
        ++cover[static_cast<size_t>(r * t.dim + c)];
      }
  }
  for (int v : cover)
    if (v != 1) return false;
  return true;
}

const TableShape kT{"t", 10, 6};

ParameterSharding gen(const ParameterShardingGenerator& g, const TableShape& t = kT, int w = 4,
                      int l = 2) {
  return g(t, w, l);
}

// The message validate_parameter_sharding raises for p on kT (W = 4, L = 2), or "" if none.
std::string error_of(const ParameterSharding& p, const TableShape& t = kT, int w = 4, int l = 2) {
  try {
    validate_parameter_sharding(p, t, w, l, "module 'ebc'");
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("torchrec plan: sharding type and compute kernel names are torchrec's", "[torchrec][plan]") {
  CHECK(to_string(ShardingType::DATA_PARALLEL) == "data_parallel");
  CHECK(to_string(ShardingType::TABLE_WISE) == "table_wise");
  CHECK(to_string(ShardingType::COLUMN_WISE) == "column_wise");
  CHECK(to_string(ShardingType::TABLE_COLUMN_WISE) == "table_column_wise");
  CHECK(to_string(ShardingType::ROW_WISE) == "row_wise");
  CHECK(to_string(ShardingType::TABLE_ROW_WISE) == "table_row_wise");
  CHECK(to_string(EmbeddingComputeKernel::DENSE) == "dense");
  CHECK(to_string(EmbeddingComputeKernel::FUSED) == "fused");
  CHECK(to_string(EmbeddingComputeKernel::FUSED_UVM_CACHING) == "fused_uvm_caching");
  CHECK(to_string(EmbeddingComputeKernel::QUANT) == "quant");
  for (auto t : all_sharding_types()) CHECK(parse_sharding_type(to_string(t)) == t);
  for (auto k : all_compute_kernels()) CHECK(parse_compute_kernel(to_string(k)) == k);
  CHECK(all_sharding_types().size() == 6);
  CHECK_THROWS_WITH(parse_sharding_type("grid_shard"),
                    Contains("unknown sharding type 'grid_shard'") && Contains("table_row_wise"));
  CHECK_THROWS_AS(parse_compute_kernel("uvm"), InvalidArgument);
}

TEST_CASE("torchrec plan: hand-written shardings of each type have the documented shards",
          "[torchrec][plan]") {
  // 10 rows x 6 cols, W = 4, L = 2.
  const auto dp = gen(data_parallel());
  CHECK(dp.sharding_type == ShardingType::DATA_PARALLEL);
  CHECK(dp.compute_kernel == EmbeddingComputeKernel::DENSE);
  CHECK(dp.ranks == std::vector<int>{0, 1, 2, 3});
  CHECK(dp.sharding_spec.empty());
  CHECK(dp.shards_on_rank(3, kT) == Shards{{{0, 0}, {10, 6}, 3}});

  const auto tw = gen(table_wise(2));
  CHECK(tw.ranks == std::vector<int>{2});
  CHECK(tw.sharding_spec == Shards{{{0, 0}, {10, 6}, 2}});
  CHECK(tw.compute_kernel == EmbeddingComputeKernel::FUSED);

  const auto rw = gen(row_wise());  // ceil(10/4) = 3: 3,3,3,1
  CHECK(rw.ranks == std::vector<int>{0, 1, 2, 3});
  CHECK(rw.sharding_spec ==
        Shards{{{0, 0}, {3, 6}, 0}, {{3, 0}, {3, 6}, 1}, {{6, 0}, {3, 6}, 2}, {{9, 0}, {1, 6}, 3}});
  // Fewer rows than a full last block: 5 rows on 4 ranks are 2,2,1,0.
  const TableShape small{"s", 5, 2};
  const auto rw5 = gen(row_wise(), small);
  CHECK(rw5.sharding_spec ==
        Shards{{{0, 0}, {2, 2}, 0}, {{2, 0}, {2, 2}, 1}, {{4, 0}, {1, 2}, 2}, {{5, 0}, {0, 2}, 3}});
  CHECK(error_of(rw5, small).empty());

  const auto twrw = gen(table_row_wise(1));  // node 1 = ranks 2,3; ceil(10/2) = 5
  CHECK(twrw.ranks == std::vector<int>{2, 3});
  CHECK(twrw.sharding_spec == Shards{{{0, 0}, {5, 6}, 2}, {{5, 0}, {5, 6}, 3}});

  const auto cw = gen(column_wise({3, 1}));
  CHECK(cw.ranks == std::vector<int>{3, 1});
  CHECK(cw.sharding_spec == Shards{{{0, 0}, {10, 3}, 3}, {{0, 3}, {10, 3}, 1}});
  const auto cw4 = gen(column_wise({0, 1, 2, 3}));  // 6 columns on 4 ranks: 2,2,1,1
  CHECK(cw4.sharding_spec == Shards{{{0, 0}, {10, 2}, 0}, {{0, 2}, {10, 2}, 1},
                                    {{0, 4}, {10, 1}, 2}, {{0, 5}, {10, 1}, 3}});
  const auto cw_same = gen(column_wise({1, 1}));  // two shards on one rank are allowed
  CHECK(error_of(cw_same).empty());

  const auto twcw = gen(table_column_wise(1));
  CHECK(twcw.sharding_type == ShardingType::TABLE_COLUMN_WISE);
  CHECK(twcw.sharding_spec == Shards{{{0, 0}, {10, 3}, 2}, {{0, 3}, {10, 3}, 3}});

  for (const auto& p : {tw, rw, twrw, cw, cw4, cw_same, twcw}) {
    INFO(p.describe());
    CHECK(tiles_exactly(p, kT));
    CHECK(error_of(p).empty());
  }
  CHECK(tiles_exactly(rw5, small));
  CHECK(even_column_widths(10, 4) == std::vector<int64_t>{3, 3, 2, 2});

  // Whole modules, with every type at once.
  const std::vector<TableShape> tables{{"a", 10, 6}, {"b", 7, 4}, {"c", 9, 8}, {"d", 3, 2},
                                       {"e", 12, 5}, {"f", 4, 4}};
  const ModuleShardingPlan plan = construct_module_sharding_plan(
      tables,
      {{"a", data_parallel()}, {"b", table_wise(3)}, {"c", column_wise({0, 2})},
       {"d", table_column_wise(0)}, {"e", row_wise()}, {"f", table_row_wise(1)}},
      4, 2, "sparse.ebc");
  CHECK(plan.size() == 6);
  CHECK(plan.at("b").sharding_spec == Shards{{{0, 0}, {7, 4}, 3}});
  CHECK(plan.at("f").ranks == std::vector<int>{2, 3});
  ShardingPlan whole({{"sparse.ebc", plan}});
  CHECK(whole.get_plan_for_module("sparse.ebc") == plan);
  CHECK_FALSE(whole.get_plan_for_module("ebc").has_value());
  CHECK_NOTHROW(validate_plan(whole, {{"sparse.ebc", tables}}, 4, 2));
  CHECK(deserialize<ShardingPlan>(serialize(whole)) == whole);
  CHECK(whole.to_string() ==
        deserialize<ShardingPlan>(serialize(whole)).to_string());
  CHECK_THAT(whole.to_string(),
             Contains("sparse.ebc\tb\ttable_wise fused ranks [3] shards [0,0]+[7,4]@3\n"));
}

TEST_CASE("torchrec plan: helpers reject shardings that cannot apply", "[torchrec][plan]") {
  const std::vector<TableShape> tables{{"t", 10, 6}};
  CHECK_THROWS_WITH(construct_module_sharding_plan(tables, {{"t", table_wise(4)}}, 4, 2),
                    Contains("table 't'") && Contains("placed on rank 4, outside [0, 4)"));
  CHECK_THROWS_WITH(construct_module_sharding_plan(tables, {{"t", table_row_wise(2)}}, 4, 2),
                    Contains("table 't'") && Contains("host index 2 outside [0, 2)"));
  CHECK_THROWS_WITH(
      construct_module_sharding_plan(tables, {{"t", column_wise({0, 1, 2, 3, 0, 1, 2})}}, 4, 2),
      Contains("table 't'") && Contains("needs 1 to 6"));
  CHECK_THROWS_WITH(construct_module_sharding_plan(tables, {}, 4, 2),
                    Contains("table 't' has no sharding given"));
  CHECK_THROWS_WITH(
      construct_module_sharding_plan(tables, {{"t", row_wise()}, {"u", row_wise()}}, 4, 2),
      Contains("table 'u', which the module does not have"));
}

TEST_CASE("torchrec plan: without a local size, the nodes come from the launcher, the group, or "
          "one node, never from torchrec's GPU default of 8", "[torchrec][plan]") {
  const std::vector<TableShape> tables{{"t", 64, 4}};
  const std::map<std::string, ParameterShardingGenerator> twrw{{"t", table_row_wise(1)}};
  torchrec_test::EnvGuard env;  // no launcher variable
  // 16 ranks: 8 would make 2 nodes of 8 that say nothing about a CPU job's hosts.
  CHECK_THROWS_WITH(construct_module_sharding_plan(tables, twrw, 16, 0, "ebc"),
                    Contains("module 'ebc': no local size was given") &&
                        Contains("split the 16 ranks into 2 nodes") &&
                        Contains("pass the local size"));
  // A launcher's variable, or an explicit local size, is taken as given.
  env.set("LOCAL_WORLD_SIZE", "4");
  CHECK(construct_module_sharding_plan(tables, twrw, 16).at("t").ranks ==
        std::vector<int>{4, 5, 6, 7});
  env.unset("LOCAL_WORLD_SIZE");
  CHECK(construct_module_sharding_plan(tables, twrw, 16, 2).at("t").ranks == std::vector<int>{2, 3});
  // Where 8 does not divide the world, one node (torchrec's answer too): table_row_wise(1) has
  // no node 1 to go to.
  CHECK(construct_module_sharding_plan(tables, {{"t", table_row_wise(0)}}, 6).at("t").ranks ==
        std::vector<int>{0, 1, 2, 3, 4, 5});
  // The Group overload: the group's size, and its nodes as the sharded modules on it take them
  // (here the launcher's variable: the local transport's ranks are threads of one process).
  env.set("LOCAL_WORLD_SIZE", "2");
  std::vector<std::vector<int>> ranks(4);
  run_ranks(4, [&](Group& world) {
    ranks[static_cast<size_t>(world.rank())] =
        construct_module_sharding_plan(tables, twrw, world).at("t").ranks;
  });
  for (const auto& r : ranks) CHECK(r == std::vector<int>{2, 3});
}

TEST_CASE("torchrec plan: each invalid sharding is rejected with a message naming the table",
          "[torchrec][plan]") {
  const std::string name = "table 't' (10 rows x 6 cols";
  auto rw = gen(row_wise());
  auto expect = [&](const ParameterSharding& p, const std::string& what) {
    const std::string msg = error_of(p);
    INFO(p.describe() << "\n -> " << msg);
    CHECK_THAT(msg, Contains(name) && Contains(what) && Contains("module 'ebc'"));
  };
  {  // wrong row block size
    auto p = rw;
    p.sharding_spec[0].shard_sizes[0] = 2;
    p.sharding_spec[1].shard_offsets[0] = 2;
    p.sharding_spec[1].shard_sizes[0] = 4;
    expect(p, "row block 0 must be [0,0]+[3,6]@0");
  }
  {  // row blocks on the wrong ranks (swapped)
    auto p = rw;
    std::swap(p.sharding_spec[0].placement, p.sharding_spec[1].placement);
    std::swap(p.ranks[0], p.ranks[1]);
    expect(p, "row block 0 must be on rank 0, is on rank 1");
  }
  {  // a rank outside the world
    auto p = gen(table_wise(0));
    p.ranks = {7};
    p.sharding_spec[0].placement = 7;
    expect(p, "placed on rank 7, outside [0, 4)");
  }
  {  // ranks disagree with the placements
    auto p = gen(table_wise(0));
    p.ranks = {1};
    expect(p, "ranks[0] = 1 but shard 0 is placed on rank 0");
  }
  {  // overlap
    auto p = gen(column_wise({0, 1}));
    p.sharding_spec[1].shard_offsets[1] = 2;
    expect(p, "overlap");
  }
  {  // a gap: the shards do not cover the table
    auto p = gen(column_wise({0, 1}));
    p.sharding_spec[1].shard_sizes[1] = 2;
    expect(p, "the shards cover 50 of the table's 60 cells");
  }
  {  // a shard outside the table
    auto p = gen(table_wise(0));
    p.sharding_spec[0].shard_sizes = {11, 6};
    expect(p, "is not inside the table");
  }
  {  // a column shard of some rows only (tiles, but not column-wise)
    ParameterSharding p{ShardingType::COLUMN_WISE, EmbeddingComputeKernel::FUSED, {0, 1},
                        {{{0, 0}, {5, 6}, 0}, {{5, 0}, {5, 6}, 1}}};
    expect(p, "column shard 0 must hold all rows [0, 10)");
  }
  {  // column shards out of column order
    auto p = gen(column_wise({0, 1}));
    std::swap(p.sharding_spec[0], p.sharding_spec[1]);
    std::swap(p.ranks[0], p.ranks[1]);
    expect(p, "column shard 0 must start at column 0");
  }
  {  // table_column_wise across nodes
    auto p = gen(column_wise({1, 2}));
    p.sharding_type = ShardingType::TABLE_COLUMN_WISE;
    expect(p, "span more than one node (local size 2): rank 2 is on node 1");
  }
  {  // table_row_wise blocks across nodes
    ParameterSharding p{ShardingType::TABLE_ROW_WISE, EmbeddingComputeKernel::FUSED, {1, 2},
                        {{{0, 0}, {5, 6}, 1}, {{5, 0}, {5, 6}, 2}}};
    expect(p, "row block 0 must be on rank 0, is on rank 1");
  }
  {  // table_row_wise with world-size blocks
    auto p = rw;
    p.sharding_type = ShardingType::TABLE_ROW_WISE;
    expect(p, "expected 2 row blocks (one per node-local rank), got 4 shards");
  }
  {  // table_wise split in two
    auto p = gen(row_wise(), kT, 2, 2);
    p.sharding_type = ShardingType::TABLE_WISE;
    expect(p, "table_wise has one shard, got 2");
  }
  {  // data_parallel with shards, with a sparse kernel, with some ranks
    auto p = gen(data_parallel());
    p.sharding_spec = {{{0, 0}, {10, 6}, 0}};
    expect(p, "data_parallel has no shards, got 1");
    p = gen(data_parallel());
    p.compute_kernel = EmbeddingComputeKernel::FUSED;
    expect(p, "data_parallel needs the dense compute kernel, got fused");
    p = gen(data_parallel());
    p.ranks = {0, 1};
    expect(p, "data_parallel ranks must be every rank [0,1,2,3], got [0,1]");
  }
  {  // 1-D metadata
    auto p = gen(table_wise(0));
    p.sharding_spec[0].shard_offsets = {0};
    expect(p, "shard 0 needs 2-D offsets and sizes");
  }
  CHECK_THAT(error_of(rw, kT, 4, 3), Contains("local size 3"));

  // Module level.
  const std::vector<TableShape> tables{{"a", 10, 6}, {"b", 4, 2}};
  ModuleShardingPlan plan{{"a", gen(row_wise())}};
  CHECK_THROWS_WITH(validate_module_plan(plan, tables, 4, 2, "ebc"),
                    Contains("module 'ebc', table 'b' has no entry in the plan"));
  plan["b"] = gen(table_wise(0), tables[1]);
  CHECK_NOTHROW(validate_module_plan(plan, tables, 4, 2, "ebc"));
  plan["c"] = gen(table_wise(0), tables[1]);
  CHECK_THROWS_WITH(validate_module_plan(plan, tables, 4, 2, "ebc"),
                    Contains("entry for table 'c', which the module does not have"));
  CHECK_THROWS_WITH(validate_module_plan(plan, {{"a", 10, 6}, {"a", 10, 6}}, 4, 2, "ebc"),
                    Contains("lists table 'a' twice"));
  plan.erase("c");
  plan["b"] = gen(table_wise(0), tables[0]);  // the shape of another table
  CHECK_THROWS_WITH(validate_module_plan(plan, tables, 4, 2, "ebc"),
                    Contains("table 'b'") && Contains("is not inside the table"));
  CHECK_THROWS_WITH(validate_plan(ShardingPlan(), {{"ebc", tables}}, 4, 2),
                    Contains("module 'ebc' has no plan"));
  CHECK_THROWS_WITH(validate_plan(ShardingPlan(std::map<std::string, ModuleShardingPlan>{{"x", {}}}), {}, 4, 2),
                    Contains("the plan has module 'x', which the model does not have"));
}

namespace {

ShardingPlan sample_plan(bool differ) {
  const std::vector<TableShape> tables{{"t0", 10, 4}, {"t1", 8, 4}};
  return ShardingPlan({{"ebc", construct_module_sharding_plan(
                                   tables,
                                   {{"t0", row_wise()}, {"t1", differ ? table_wise(2) : table_wise(1)}},
                                   4, 2, "ebc")}});
}

// Every rank's MismatchError message ("" when it passed).
std::vector<std::string> agreement(int w, const std::vector<int>& differing) {
  std::vector<std::string> out(static_cast<size_t>(w));
  run_ranks(w, [&](Group& world) {
    const bool differ =
        std::find(differing.begin(), differing.end(), world.rank()) != differing.end();
    try {
      check_plan_agreement(sample_plan(differ), world);
    } catch (const MismatchError& e) {
      out[static_cast<size_t>(world.rank())] = e.what();
    }
  });
  return out;
}

}  // namespace

TEST_CASE("torchrec plan: the agreement check passes equal plans and names a differing rank",
          "[torchrec][plan]") {
  CHECK(plan_fingerprint(sample_plan(false)) == plan_fingerprint(sample_plan(false)));
  CHECK(plan_fingerprint(sample_plan(false)) != plan_fingerprint(sample_plan(true)));

  for (const auto& msg : agreement(4, {})) CHECK(msg.empty());
  for (const auto& msg : agreement(1, {})) CHECK(msg.empty());

  const auto three = agreement(3, {2});
  for (const auto& msg : three) {
    INFO(msg);
    CHECK_THAT(msg, Contains("ranks [2] differ from rank 0's plan (held by ranks [0,1])") &&
                        Contains("module 'ebc', table 't1': rank 0 has 'table_wise fused ranks [1]") &&
                        Contains("rank 2 has 'table_wise fused ranks [2]"));
  }
  // Rank 0 is the odd one out: the majority's plan is the reference.
  const auto four = agreement(4, {0});
  for (const auto& msg : four) {
    INFO(msg);
    CHECK_THAT(msg, Contains("ranks [0] differ from rank 1's plan (held by ranks [1,2,3])"));
  }
  // A tie (2 against 2): the lowest rank's plan is the reference.
  const auto tie = agreement(4, {1, 3});
  for (const auto& msg : tie) CHECK_THAT(msg, Contains("ranks [1,3] differ from rank 0's plan"));

  // A plan with a table the others lack.
  std::vector<std::string> missing(2);
  run_ranks(2, [&](Group& world) {
    ShardingPlan plan = sample_plan(false);
    if (world.rank() == 1) plan = ShardingPlan({{"ebc", {{"t0", plan.plan().at("ebc").at("t0")}}}});
    try {
      check_plan_agreement(plan, world);
    } catch (const MismatchError& e) {
      missing[static_cast<size_t>(world.rank())] = e.what();
    }
  });
  for (const auto& msg : missing)
    CHECK_THAT(msg, Contains("table 't1': rank 0 has 'table_wise") &&
                        Contains("rank 1 has no entry"));

  // broadcast_plan: rank 2's plan reaches everyone.
  std::vector<ShardingPlan> got(3);
  run_ranks(3, [&](Group& world) {
    got[static_cast<size_t>(world.rank())] = broadcast_plan(sample_plan(world.rank() == 2), world, 2);
  });
  for (const auto& p : got) CHECK(p == sample_plan(true));
}
