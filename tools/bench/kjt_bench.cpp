// The synthetic KJT: T features ("f0".."f{T-1}"), B samples per rank, bag lengths drawn from a
// Pareto law of shape 2 scaled to the mean pooling factor P (capped at 32 P), ids uniform in
// [0, 2^40). Features go to ranks in consecutive, nearly equal splits (table-wise sharding).
//
// Per timed iteration (after a barrier, alternating which of the two goes first):
//   kjt    phase 1 = a2a(kjt) + .wait() (the counts exchange and the launch of phase 2),
//          phase 2 = the second wait (the payload and the recat into the output KJT);
//   raw    one all_to_all_single of uint8 with the same per-destination byte counts;
//   small  one all_gather of the phase-1 record's size (the small-message latency).
// Reported: medians over iterations of the slowest rank, and total / (raw + small).
#include "tools/bench/kjt_bench.h"

#include <ferry/collectives/torchrec/torchrec.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

namespace ferry::bench {

using torchrec::KeyedJaggedTensor;
using torchrec::KJTAllToAll;

namespace {

KeyedJaggedTensor synthetic_kjt(const Options& o, int rank) {
  std::mt19937_64 rng(0x6b6a74 + 7919 * static_cast<uint64_t>(rank));
  std::uniform_real_distribution<double> u(1e-12, 1.0);
  const double xm = o.kjt_pooling / 2.0;  // Pareto(shape 2) has mean 2 xm
  std::vector<std::string> keys;
  for (int64_t t = 0; t < o.kjt_features; ++t) {  // (not "f" + to_string: GCC 12 -Wrestrict)
    keys.emplace_back("f");
    keys.back() += std::to_string(t);
  }
  std::vector<int64_t> lengths, values;
  std::vector<float> weights;
  const int64_t cap = static_cast<int64_t>(32 * o.kjt_pooling);
  for (int64_t i = 0; i < o.kjt_features * o.kjt_batch; ++i) {
    const int64_t l = std::min<int64_t>(cap, static_cast<int64_t>(std::floor(xm / std::sqrt(u(rng)) + 0.5)));
    lengths.push_back(l);
    for (int64_t j = 0; j < l; ++j) {
      values.push_back(static_cast<int64_t>(rng() >> 24));
      if (o.kjt_weighted) weights.push_back(static_cast<float>(j));
    }
  }
  return KeyedJaggedTensor::from_lengths_sync(keys, from_vector(values), from_vector(lengths),
                                              o.kjt_weighted ? from_vector(weights) : Tensor());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace

bool run_kjt_bench(const Options& o, Group& world, RankSync& sync, bool print) {
  using clock = std::chrono::steady_clock;
  const int W = world.size(), me = world.rank();
  std::vector<int64_t> splits(W, o.kjt_features / W);
  for (int j = 0; j < o.kjt_features % W; ++j) ++splits[j];
  // FERRY_BENCH_KJT_BACKGROUND=0 measures KJTAllToAllOptions::progress_in_background = false (the
  // module's default is on: its collectives are handed to the progress thread).
  const char* bg_env = std::getenv("FERRY_BENCH_KJT_BACKGROUND");
  const bool background = bg_env == nullptr || std::string(bg_env) != "0";
  const KJTAllToAll a2a(world, splits, 1, {.progress_in_background = background});
  const KeyedJaggedTensor kjt = synthetic_kjt(o, me);

  // Check once against the inputs every rank regenerates.
  bool ok = true;
  torchrec::KJTAllToAllTensorsAwaitable p2 = a2a(kjt).wait();
  const KeyedJaggedTensor out = p2.wait();
  {
    std::vector<KeyedJaggedTensor> all;
    for (int s = 0; s < W; ++s) all.push_back(s == me ? kjt : synthetic_kjt(o, s));
    for (const std::string& key : out.keys()) {
      std::vector<int64_t> want;
      for (const KeyedJaggedTensor& k : all) {
        const std::vector<int64_t> v = k[key].values().to_vector<int64_t>();
        want.insert(want.end(), v.begin(), v.end());
      }
      ok = ok && out[key].values().to_vector<int64_t>() == want;
    }
  }
  if (!sync.all_of(ok)) {
    if (print) std::fprintf(stderr, "kjt_all_to_all: the received KJT is wrong\n");
    return false;
  }

  // The raw move: the same bytes per destination / source as one uint8 all_to_all_single.
  std::vector<int64_t> send_bytes(W, 0), recv_bytes(W, 0);
  const std::vector<Tensor> dist = torchrec::kjt_dist_tensors(kjt);
  for (size_t l = 0; l < p2.labels().size(); ++l)
    for (int j = 0; j < W; ++j) {
      send_bytes[j] += p2.input_splits()[l][j] * static_cast<int64_t>(dist[l].element_size());
      recv_bytes[j] += p2.output_splits()[l][j] * static_cast<int64_t>(dist[l].element_size());
    }
  int64_t ns = 0, nr = 0;
  for (int j = 0; j < W; ++j) ns += send_bytes[j], nr += recv_bytes[j];
  Tensor raw_in = zeros({ns}, DType::UInt8), raw_out = empty({nr}, DType::UInt8);
  // The phase-1 record: 7 + 4 W words and one per key (kjt_all_to_all.cpp).
  const int64_t record = 7 + 4 * W + o.kjt_features;
  Tensor small_in = zeros({record}, DType::Int64), small_out = empty({W * record}, DType::Int64);

  const int iters = o.iters > 0 ? o.iters : 50;
  std::vector<double> t1, t2, tt, traw, tsmall;
  for (int it = -o.warmup; it < iters; ++it) {
    double d1 = 0, d2 = 0, draw = 0, dsmall = 0;
    auto kjt_once = [&] {
      barrier(world).wait();
      auto a = clock::now();
      auto q = a2a(kjt).wait();
      auto b = clock::now();
      q.wait();
      auto c = clock::now();
      d1 = std::chrono::duration<double, std::micro>(b - a).count();
      d2 = std::chrono::duration<double, std::micro>(c - b).count();
    };
    auto raw_once = [&] {
      barrier(world).wait();
      auto a = clock::now();
      all_to_all_single(raw_in, raw_out, recv_bytes, send_bytes, world).wait();
      draw = std::chrono::duration<double, std::micro>(clock::now() - a).count();
    };
    if (it % 2 == 0) kjt_once(), raw_once();
    else raw_once(), kjt_once();
    barrier(world).wait();
    auto a = clock::now();
    all_gather(small_in, small_out, world).wait();
    dsmall = std::chrono::duration<double, std::micro>(clock::now() - a).count();
    // the slowest rank's times
    const std::vector<double> m = sync.max_over_ranks({d1, d2, draw, dsmall});
    if (it < 0) continue;
    t1.push_back(m[0]);
    t2.push_back(m[1]);
    tt.push_back(m[0] + m[1]);
    traw.push_back(m[2]);
    tsmall.push_back(m[3]);
  }
  if (print) {
    const double total = median(tt), raw = median(traw), small = median(tsmall);
    std::printf("# kjt_all_to_all: W=%d features=%lld batch=%lld pooling=%.0f%s, rank 0 sends %lld "
                "B, receives %lld B; progress_in_background %s; %d iterations, medians of the slowest "
                "rank (us)\n",
                W, static_cast<long long>(o.kjt_features), static_cast<long long>(o.kjt_batch),
                o.kjt_pooling, o.kjt_weighted ? " weighted" : "", static_cast<long long>(ns),
                static_cast<long long>(nr), background ? "on" : "off", iters);
    std::printf("%10s %10s %10s %10s %10s %22s\n", "phase1", "phase2", "total", "raw_a2a",
                "small", "total/(raw+small)");
    std::printf("%10.1f %10.1f %10.1f %10.1f %10.1f %22.2f\n", median(t1), median(t2), total, raw,
                small, total / (raw + small));
    std::fflush(stdout);
  }
  return true;
}

}  // namespace ferry::bench
