// Quantized comm codecs through the sharded EBC, the codecs built from a QCommsConfig: for each
// sharding type whose output dist communicates (table_wise, column_wise, row_wise, table_row_wise,
// table_column_wise), W = 2 and 4, float32 tables, FP16 and BF16 forward and backward codecs: the
// forward output stays within the codec's rounding of the unquantized sharded output, and differs
// from it (the codec really ran); after one fused SGD step the tables stay within the same bound of
// the unquantized run's. INT8 on a reduce-scatter (row-wise) is refused by the registry's rules
// before any data moves.
#include <ferry/autograd/ops.h>
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/torchrec/torchrec.h>
#include "tests/torchrec/comm_test_helpers.h"
#include "tests/torchrec/sharded_test_util.h"
#include "tests/differentiable/spmd_gradcheck.h"

#include <cmath>
#include <random>
#include <sstream>

using namespace ferry;
using namespace ferry::torchrec;
using dgtest::expect;

namespace {

const testing::TableList kTables{
    {"t0", 40, 8}, {"t1", 25, 16}, {"t2", 33, 8}};

std::vector<EmbeddingBagConfig> configs() { return testing::bag_configs_of(kTables, DType::Float32); }
std::vector<TableShape> shapes() { return testing::shapes_of(kTables); }

// This rank's 4 samples: 1..3 ids per bag.
KeyedJaggedTensor features(int rank) {
  std::mt19937_64 rng(101 + static_cast<uint64_t>(rank));
  std::vector<std::string> keys;
  std::vector<int64_t> lengths, ids;
  for (const auto& [name, rows, dim] : kTables) {
    keys.push_back("f" + name);
    for (int s = 0; s < 4; ++s) {
      const int64_t n = 1 + static_cast<int64_t>(rng() % 3);
      lengths.push_back(n);
      for (int64_t j = 0; j < n; ++j)
        ids.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(rows)));
    }
  }
  return KeyedJaggedTensor::from_lengths_sync(keys, from_vector(ids), from_vector(lengths));
}

ParameterShardingGenerator generator(ShardingType type, int i, int W) {
  switch (type) {
    case ShardingType::TABLE_WISE: return table_wise(i % W);
    case ShardingType::COLUMN_WISE: return column_wise({0, W - 1});
    case ShardingType::ROW_WISE: return row_wise();
    case ShardingType::TABLE_ROW_WISE: return table_row_wise(0);
    case ShardingType::TABLE_COLUMN_WISE: return table_column_wise(0);
    default: return data_parallel();
  }
}


struct Run {
  Tensor output;
  std::map<std::string, Tensor> tables;
};

// Forward, loss = sum(y * y) / 2 / samples, backward (fused SGD), the tables.
Run run(ShardingType type, const Group& g, std::optional<QCommsConfig> codecs) {
  const int W = g.size();
  std::map<std::string, ParameterShardingGenerator> gens;
  for (size_t i = 0; i < kTables.size(); ++i)
    gens[std::get<0>(kTables[i])] = generator(type, static_cast<int>(i), W);
  ShardedEmbeddingOptions o;
  o.local_size = W / 2;
  o.qcomms_config = codecs;
  ShardedEmbeddingBagCollection s(configs(), false,
                                  construct_module_sharding_plan(shapes(), gens, W, W / 2), g, o,
                                  FusedOptimizerConfig{.learning_rate = 0.5}, 11);
  PooledEmbeddings y = s.forward(features(g.rank()));
  Run r{y.values.value().clone(), {}};
  div(sum(mul(y.values, y.values)), 8.0).backward();
  r.tables = s.state_dict();
  return r;
}

}  // namespace

DG_CASE("sharded EBC with FP16 / BF16 comm codecs: within the codec's rounding of the "
        "unquantized run, forward and after a step; INT8 refused on a reduce-scatter",
        "[torchrec][sharded][codecs]", 2, 4) {
  for (ShardingType type : {ShardingType::TABLE_WISE, ShardingType::COLUMN_WISE,
                            ShardingType::ROW_WISE, ShardingType::TABLE_ROW_WISE,
                            ShardingType::TABLE_COLUMN_WISE}) {
    const Run exact = run(type, g, std::nullopt);
    for (CommType codec : {CommType::FP16, CommType::BF16}) {
      std::ostringstream what;
      what << to_string(type) << " with " << comm_type_name(codec) << " on W = "
           << g.size();
      // fp16 keeps 11 significant bits, bf16 8: a relative rounding of 2^-11 / 2^-8 per value,
      // a little more after the sums of a reduce-scatter.
      const double bound = codec == CommType::FP16 ? 4e-3 : 3e-2;
      const Run q = run(type, g, QCommsConfig(codec, codec));
      const double fwd = testing::max_rel_err(q.output, exact.output);
      expect(fwd <= bound, g, what.str() + ": forward relative error " + std::to_string(fwd));
      expect(fwd > 0, g, what.str() + ": the output is exact, so the codec did not run");
      for (const auto& [key, t] : exact.tables) {
        const double e = testing::max_rel_err(q.tables.at(key), t);
        expect(e <= bound, g, what.str() + ": " + key + " after a step, relative error " +
                                  std::to_string(e));
      }
    }
  }
  trtest::expect_invalid([&] { run(ShardingType::ROW_WISE, g, QCommsConfig(CommType::INT8)); },
                         {"cannot be summed"}, g, "INT8 on row_wise's reduce-scatter");
}
