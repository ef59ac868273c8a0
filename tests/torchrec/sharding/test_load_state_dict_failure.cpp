// A sharded EBC's load_state_dict is local: given a state it refuses on one rank only (here a
// transposed table, as a program built with another configuration would hand it), that rank
// throws and the others do not. Pinned:
//  - inside checkpoint::agree every rank raises the same error naming the rank, the ranks stay in
//    step (the next forward's all_to_all pairs up), and a good state loads afterwards;
//  - without it, the failing rank's error ends it and the others' next forward raises
//    PeerFailure naming it, at once.
#include <ferry/collectives/checkpoint/checkpoint.h>
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/run_ranks.h>
#include <ferry/collectives/torchrec/torchrec.h>
#include <ferry/runtime/error.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <vector>

using namespace ferry;
using namespace ferry::torchrec;
using Catch::Matchers::Contains;

namespace {

constexpr int kWorld = 3;
constexpr int kFailing = 1;

std::vector<EmbeddingBagConfig> configs() {
  return {{.name = "t0", .num_embeddings = 8, .embedding_dim = 4, .feature_names = {"f0"},
           .pooling = PoolingType::Sum, .data_type = DType::Float32},
          {.name = "t1", .num_embeddings = 6, .embedding_dim = 3, .feature_names = {"f1"},
           .pooling = PoolingType::Sum, .data_type = DType::Float32}};
}

ShardedEmbeddingBagCollection sharded(Group& g) {
  const ModuleShardingPlan plan = construct_module_sharding_plan(
      {{"t0", 8, 4}, {"t1", 6, 3}}, {{"t0", row_wise()}, {"t1", table_wise(2)}}, kWorld, kWorld);
  return ShardedEmbeddingBagCollection(configs(), false, plan, g, {.local_size = kWorld},
                                       std::nullopt, 11);
}

// The tables of another seed's unsharded collection; on kFailing t1 comes transposed.
std::map<std::string, Tensor> state_for(int rank) {
  std::map<std::string, Tensor> state = EmbeddingBagCollection(configs(), false, 5).state_dict();
  if (rank == kFailing) {
    Tensor& t1 = state.at("embedding_bags.t1.weight");
    t1 = t1.reshape({t1.size(1), t1.size(0)});
  }
  return state;
}

// Two samples per rank, one id per feature each: the forward is an all_to_all on every rank.
Tensor forward(ShardedEmbeddingBagCollection& s, int rank) {
  const KeyedJaggedTensor kjt = KeyedJaggedTensor::from_lengths_sync(
      {"f0", "f1"}, from_vector<int64_t>({rank, rank + 1, rank % 6, (rank + 2) % 6}),
      from_vector<int64_t>({1, 1, 1, 1}));
  return s.forward(kjt).values.value();
}

}  // namespace

TEST_CASE("sharded EBC load_state_dict failing on one rank inside agree: every rank raises it, "
          "in step",
          "[torchrec][load-failure]") {
  std::mutex mu;
  std::vector<std::string> errors(kWorld);
  std::vector<Shape> shapes(kWorld);
  std::vector<bool> reloaded(kWorld, false);
  run_ranks(kWorld, [&](Group& g) {
    ShardedEmbeddingBagCollection s = sharded(g);
    std::string error;
    try {
      checkpoint::agree(g, "loading the embeddings", [&] { s.load_state_dict(state_for(g.rank())); });
    } catch (const InvalidArgument& e) {
      error = e.what();
    }
    const Tensor y = forward(s, g.rank());  // every rank's all_to_all is the same one
    // A good state, on every rank: loaded, and what the collection holds afterwards.
    const std::map<std::string, Tensor> good = state_for(-1);
    checkpoint::agree(g, "loading the embeddings again", [&] { s.load_state_dict(good); });
    const std::map<std::string, Tensor> back = s.state_dict();  // collective: gathers the shards
    bool same = true;
    for (const auto& [key, t] : good)
      same = same && back.at(key).to_vector<float>() == t.to_vector<float>();
    std::lock_guard<std::mutex> lock(mu);
    errors[static_cast<size_t>(g.rank())] = error;
    shapes[static_cast<size_t>(g.rank())] = y.shape();
    reloaded[static_cast<size_t>(g.rank())] = same;
  });
  INFO("rank 0: " << errors[0]);
  REQUIRE_FALSE(errors[0].empty());
  for (const std::string& e : errors) CHECK(e == errors[0]);
  CHECK_THAT(errors[0], Contains("loading the embeddings: rank 1: ") &&
                            Contains("\"embedding_bags.t1.weight\" must be [6, 3], given [3, 6]"));
  for (int r = 0; r < kWorld; ++r) {
    CHECK(shapes[static_cast<size_t>(r)] == Shape{2, 7});
    CHECK(reloaded[static_cast<size_t>(r)]);
  }
}

TEST_CASE("sharded EBC load_state_dict failing on one rank outside agree: the others' next "
          "forward raises PeerFailure naming it",
          "[torchrec][load-failure]") {
  std::mutex mu;
  std::vector<std::string> peer_errors(kWorld);
  const auto t0 = std::chrono::steady_clock::now();
  std::string first;
  try {
    run_ranks(kWorld, [&](Group& g) {
      ShardedEmbeddingBagCollection s = sharded(g);
      s.load_state_dict(state_for(g.rank()));  // throws on kFailing only, which ends that rank
      try {
        (void)forward(s, g.rank());
      } catch (const PeerFailure& e) {
        std::lock_guard<std::mutex> lock(mu);
        peer_errors[static_cast<size_t>(g.rank())] = e.what();
        throw;
      }
    });
  } catch (const InvalidArgument& e) {
    first = e.what();
  }
  CHECK_THAT(first, Contains("rank 1: ") && Contains("must be [6, 3], given [3, 6]"));
  for (int r = 0; r < kWorld; ++r) {
    if (r == kFailing) continue;
    INFO("rank " << r << ": " << peer_errors[static_cast<size_t>(r)]);
    CHECK_THAT(peer_errors[static_cast<size_t>(r)], Contains("rank 1"));
  }
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20));  // not a deadline
}
