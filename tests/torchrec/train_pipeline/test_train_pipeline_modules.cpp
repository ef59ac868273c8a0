// Train pipelines over several sharded modules (pipeline_modules_case.h: three
// EmbeddingBagCollections, two EmbeddingCollections, a plain ShardedModule): sparse-dist is
// bit-identical to base; every module's next input dist is in flight during the current step
// (started before the dense step, received after it); the input checks ride on the agreement (as
// many collectives per step with the check on as off, and as many in both pipelines). Ranks are
// threads (run_ranks); Catch2 assertions run on the main thread only, on what the ranks recorded.
#include <ferry/autograd/ops.h>
#include <ferry/autograd/optimizer.h>
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/run_ranks.h>
#include <ferry/collectives/torchrec/torchrec.h>
#include "tests/torchrec/train_pipeline/pipeline_modules_case.h"

#include <catch2/catch.hpp>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

using namespace ferry;
using namespace ferry::torchrec;
using namespace ferry::torchrec::testing::pipeline_modules;

TEST_CASE("train pipeline: several EBCs and ECs (all six sharding types among them) and a plain "
          "sharded module: sparse-dist is bit-identical to base",
          "[train_pipeline]") {
  const SyntheticCriteo d = data(16 * 4 * 5);
  for (int W = 1; W <= 4; ++W) {
    INFO("W = " << W);
    std::mutex mu;
    bool identical = true;
    std::vector<int64_t> steps(2, -1), counted(2, -1);
    run_ranks(W, [&](Group& world) {
      std::vector<std::vector<Tensor>> logits(2), state(2);
      int64_t n[2] = {0, 0}, c[2] = {0, 0};
      for (int pipelined = 0; pipelined < 2; ++pipelined) {
        std::unique_ptr<Multi> m = build_multi(world, {.pipelined = pipelined == 1});
        SyntheticCriteoSource source(d, Split::Train, shard(world));
        for (const TrainStepOutput& out : m->pipeline->execute_all_batches(source)) {
          logits[static_cast<size_t>(pipelined)].push_back(out.logits);
          ++n[pipelined];
        }
        state[static_cast<size_t>(pipelined)] = snapshot(*m);
        c[pipelined] = m->counter->steps;
      }
      bool same = logits[0].size() == logits[1].size() && state[0].size() == state[1].size();
      for (size_t i = 0; same && i < logits[0].size(); ++i) same = equal(logits[0][i], logits[1][i]);
      for (size_t i = 0; same && i < state[0].size(); ++i) same = equal(state[0][i], state[1][i]);
      std::lock_guard lock(mu);
      identical = identical && same;
      steps = {n[0], n[1]};
      counted = {c[0], c[1]};
    });
    CHECK(identical);
    CHECK(steps[0] == 20 / W);
    CHECK(steps[1] == steps[0]);
    // The plain module is stepped by the dmp once per step, in both pipelines.
    CHECK(counted[0] == steps[0]);
    CHECK(counted[1] == steps[0]);
  }
}

TEST_CASE("train pipeline: during each step of the sparse-dist pipeline every module's next "
          "input dist is in flight", "[train_pipeline]") {
  // Batch k+1's input dist of every module must be started before batch k's dense step and
  // received only after it. The base pipeline, which has no overlap, must fail the same
  // check for every step (the check sees the difference).
  constexpr int W = 2;
  const SyntheticCriteo d = data(16 * W * 6);
  std::mutex mu;
  std::vector<std::string> problems;
  std::vector<long> overlapped_steps(2, -1), modules_seen(2, -1), steps(2, -1);
  run_ranks(W, [&](Group& world) {
    for (int pipelined = 0; pipelined < 2; ++pipelined) {
      std::unique_ptr<Multi> m =
          build_multi(world, {.pipelined = pipelined == 1, .traced = true});
      SyntheticCriteoSource source(d, Split::Train, shard(world));
      const auto n = static_cast<int64_t>(m->pipeline->execute_all_batches(source).size());
      long overlapped = 0;  // steps k < n - 1 where every module's batch k+1 was in flight
      std::string problem;
      for (int64_t k = 0; k + 1 < n; ++k) {
        const long dense = position(m->events, kDense, -1, k);
        bool all = true;
        for (int mod = 0; mod < static_cast<int>(m->traced.size()); ++mod) {
          const long started = position(m->events, kStart, mod, k + 1);
          const long done = position(m->events, kDone, mod, k + 1);
          const bool in_flight = started >= 0 && started < dense && dense < done;
          all = all && in_flight;
          if (!in_flight && pipelined && problem.empty())
            problem = "rank " + std::to_string(world.rank()) + ", module " +
                      m->traced[static_cast<size_t>(mod)]->name() + ", step " +
                      std::to_string(k) + ": batch " + std::to_string(k + 1) +
                      "'s input dist started at event " + std::to_string(started) +
                      ", received at " + std::to_string(done) + ", dense step at " +
                      std::to_string(dense);
        }
        overlapped += all ? 1 : 0;
      }
      std::lock_guard lock(mu);
      if (!problem.empty()) problems.push_back(problem);
      overlapped_steps[static_cast<size_t>(pipelined)] = overlapped;
      modules_seen[static_cast<size_t>(pipelined)] = static_cast<long>(m->traced.size());
      steps[static_cast<size_t>(pipelined)] = static_cast<long>(n);
    }
  });
  std::string all_problems;
  for (const std::string& p : problems) all_problems += p + "\n";
  INFO(all_problems);
  CHECK(problems.empty());
  CHECK(modules_seen[1] == 5);  // the bag and the sequence collections, not the plain one
  CHECK(steps[1] == 6);
  CHECK(overlapped_steps[1] == steps[1] - 1);  // every step but the last (no next batch)
  CHECK(overlapped_steps[0] == 0);
}

TEST_CASE("train pipeline: the input checks ride on the agreement: as many collectives per step "
          "with the checks on as off, in both pipelines", "[train_pipeline]") {
  // The collectives a step issues on the group (its sequence number, read at each dense step)
  // depend on the data (the data_parallel tables' reduction), so the counts are compared step
  // by step: an input dist that ran a check exchange of its own would add one per module and
  // step with the checks on.
  constexpr int W = 3;
  const SyntheticCriteo d = data(16 * W * 6);
  std::mutex mu;
  // Collectives between dense steps k and k+1 (the drain's last interval left out), by
  // (pipelined, check_inputs), rank 0's; whether every rank saw the same.
  std::map<std::pair<int, int>, std::vector<uint64_t>> per_step;
  bool ranks_agree = true;
  run_ranks(W, [&](Group& world) {
    for (int pipelined = 0; pipelined < 2; ++pipelined) {
      for (int check = 0; check < 2; ++check) {
        std::unique_ptr<Multi> m = build_multi(
            world, {.pipelined = pipelined == 1, .check_inputs = check == 1});
        SyntheticCriteoSource source(d, Split::Train, shard(world));
        m->pipeline->execute_all_batches(source);
        std::vector<uint64_t> deltas;
        for (size_t k = 0; k + 2 < m->seq_at_dense.size(); ++k)
          deltas.push_back(m->seq_at_dense[k + 1] - m->seq_at_dense[k]);
        std::lock_guard lock(mu);
        auto [it, first] = per_step.try_emplace({pipelined, check}, deltas);
        ranks_agree = ranks_agree && (first || it->second == deltas);
      }
    }
  });
  auto show = [](const std::vector<uint64_t>& v) {
    std::string out;
    for (uint64_t x : v) out += std::to_string(x) + " ";
    return out;
  };
  const std::vector<uint64_t> base = per_step[std::make_pair(0, 1)];
  const std::vector<uint64_t> base_off = per_step[std::make_pair(0, 0)];
  const std::vector<uint64_t> sparse_dist = per_step[std::make_pair(1, 1)];
  const std::vector<uint64_t> sparse_dist_off = per_step[std::make_pair(1, 0)];
  INFO("collectives per step: base " << show(base) << "/ sparse-dist " << show(sparse_dist)
                                     << "(checks off: " << show(base_off) << "/ "
                                     << show(sparse_dist_off) << ")");
  CHECK(ranks_agree);
  CHECK(sparse_dist.size() == 4);
  CHECK(sparse_dist == sparse_dist_off);
  CHECK(base == base_off);
  CHECK(sparse_dist == base);
}
