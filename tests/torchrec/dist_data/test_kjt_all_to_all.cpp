// KJTAllToAll across ranks (SPMD: local threads here, MPI / UCX processes in
// test_torchrec_spmd): torchrec's docs example, recat and stagger,
// weights, unequal batches, variable stride per key, W = 1, both phases asynchronous, properties on
// seeded random KJTs (the reverse exchange through the exposed splits gives the input back, ids
// preserved, per-key order), row-wise bucketization end to end, and bad input failing on every
// rank.
// GCC 12 at -O3 reports a false -Wrestrict inside std::string's operator+ with a literal.
#pragma GCC diagnostic ignored "-Wrestrict"
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/torchrec/torchrec.h>
#include "tests/torchrec/jagged_test_util.h"
#include "kjt_case.h"

#include <random>
#include <optional>

using namespace ferry;
using namespace ferry::torchrec;
using namespace ferry::torchrec::testing;
using kjttest::first_ranks;
using kjttest::need;
using kjttest::need_eq;

namespace {

using Keys = std::vector<std::string>;

// torchrec's KJTAllToAll docs example (ids A0..A4 = 100..104, B = 200.., C = 300..), weights = id / 1000 when weighted.
KeyedJaggedTensor docs_example(int rank, bool weighted) {
  V values = rank == 0 ? V{100, 101, 102, 200, 201, 300, 301} : V{103, 104, 202, 203, 204, 302, 303};
  V lengths = rank == 0 ? V{1, 0, 2, 0, 1, 1, 1, 1, 0} : V{1, 1, 0, 0, 1, 2, 1, 1, 0};
  Tensor w;
  if (weighted) {
    std::vector<double> wd;
    for (int64_t v : values) wd.push_back(v / 1000.0);
    w = from_vector(wd);
  }
  return KeyedJaggedTensor::from_lengths_sync({"A", "B", "C"}, i64(values), i64(lengths), w);
}

Tensor lengths_i32(const V& v) { return i32(std::vector<int32_t>(v.begin(), v.end())); }

Keys make_keys(int64_t K) {
  Keys keys;
  for (int64_t k = 0; k < K; ++k) {
    keys.emplace_back("f");
    keys.back() += std::to_string(k);
  }
  return keys;
}

// Position of each source in the output, from the stagger: with n = W / stagger, source
// s = x + n*y (x < n, y < stagger) comes x*stagger + y-th. Written independently of get_recat.
std::vector<int> source_order(int W, int stagger) {
  std::vector<int> order(W);
  const int n = W / stagger;
  for (int s = 0; s < W; ++s) order[(s % n) * stagger + s / n] = s;
  return order;
}

// A random KJT per rank, the same on every rank for the same seed (every rank builds all of
// them to know what to expect).
struct RandomCase {
  int64_t K = 0;
  int stagger = 1;
  bool weighted = false, vbe = false, int32_lengths = false;
  V splits;
  std::vector<KeyedJaggedTensor> inputs;  // one per rank
};

RandomCase random_case(uint64_t seed, int W) {
  std::mt19937_64 rng(seed);
  RandomCase c;
  c.K = static_cast<int64_t>(rng() % 7);
  std::vector<int> divisors;
  for (int d = 1; d <= W; ++d)
    if (W % d == 0) divisors.push_back(d);
  c.stagger = divisors[rng() % divisors.size()];
  c.weighted = rng() % 2 == 0;
  c.vbe = rng() % 4 == 0 && c.K > 0;
  c.int32_lengths = rng() % 3 == 0;
  c.splits.assign(W, 0);
  for (int64_t k = 0; k < c.K; ++k) ++c.splits[rng() % W];
  const Keys keys = make_keys(c.K);
  for (int s = 0; s < W; ++s) {
    const int64_t B = static_cast<int64_t>(rng() % 5);
    std::vector<V> spkr;
    int64_t entries = 0;
    for (int64_t k = 0; k < c.K; ++k) {
      spkr.push_back({c.vbe ? static_cast<int64_t>(rng() % 4) : B});
      entries += spkr.back()[0];
    }
    V lengths, values;
    std::vector<float> w;
    for (int64_t i = 0; i < entries; ++i) {
      // power-law-ish: mostly short bags, some long
      const uint64_t r = rng() % 16;
      lengths.push_back(r < 8 ? static_cast<int64_t>(r % 3) : r < 14 ? 3 + static_cast<int64_t>(r % 4) : 12);
      for (int64_t j = 0; j < lengths.back(); ++j) {
        values.push_back(static_cast<int64_t>(rng() % 100000));
        w.push_back(static_cast<float>(values.back() % 1000) + 0.25f);
      }
    }
    Tensor lt = c.int32_lengths ? lengths_i32(lengths) : i64(lengths);
    c.inputs.push_back(KeyedJaggedTensor::from_lengths_sync(
        keys, i64(values), lt, c.weighted ? f32(w) : Tensor(), c.vbe ? std::nullopt : std::optional<int64_t>(B),
        c.vbe ? std::optional<std::vector<V>>(spkr) : std::nullopt));
  }
  return c;
}

// Lengths of `key` in `kjt` as a vector; values likewise.
V key_lengths(const KeyedJaggedTensor& kjt, const std::string& key) { return iv(kjt[key].lengths()); }
V key_values(const KeyedJaggedTensor& kjt, const std::string& key) { return iv(kjt[key].values()); }

// The reverse exchange, as an embedding dist does it with the exposed splits: put the received
// KJT back in source-major order ([source][key][sample]) and send every source its part, with
// the splits swapped. Returns (lengths, values) as the source had them (uniform stride only).
std::pair<V, V> reverse_exchange(const KeyedJaggedTensor& out, const KJTAllToAllTensorsAwaitable& p2,
                                 const Group& g, int stagger) {
  const int W = g.size();
  const std::vector<int64_t>& spr = p2.stride_per_rank();
  const std::vector<int> order = source_order(W, stagger);
  // sample offset of source s inside every key's output samples
  std::vector<int64_t> sample_off(W, 0);
  for (int pos = 0, acc = 0; pos < W; ++pos) {
    sample_off[order[pos]] = acc;
    acc += static_cast<int>(spr[order[pos]]);
  }
  V send_l, send_v;
  for (int s = 0; s < W; ++s)
    for (const std::string& key : out.keys()) {
      const V l = key_lengths(out, key), v = key_values(out, key);
      int64_t vstart = 0;
      for (int64_t b = 0; b < sample_off[s]; ++b) vstart += l[b];
      for (int64_t b = 0; b < spr[s]; ++b) {
        send_l.push_back(l[sample_off[s] + b]);
        for (int64_t j = 0; j < l[sample_off[s] + b]; ++j) send_v.push_back(v[vstart++]);
      }
    }
  const std::vector<int64_t>& in_l = p2.input_splits("lengths");
  const std::vector<int64_t>& out_l = p2.output_splits("lengths");
  const std::vector<int64_t>& in_v = p2.input_splits("values");
  const std::vector<int64_t>& out_v = p2.output_splits("values");
  int64_t nl = 0, nv = 0;
  for (int64_t x : in_l) nl += x;
  for (int64_t x : in_v) nv += x;
  Tensor rl = empty({nl}, DType::Int64), rv = empty({nv}, DType::Int64);
  // send what I received (output splits), receive what I sent (input splits)
  Work a = all_to_all_single(i64(send_l), rl, in_l, out_l, g);
  Work b = all_to_all_single(i64(send_v), rv, in_v, out_v, g);
  a.wait();
  b.wait();
  return {iv(rl), iv(rv)};
}

}  // namespace

KJT_CASE("KJTAllToAll: the docs example, exactly", "[kjt_a2a][worked]", 2, 3) {
  Group sub = first_ranks(g, 2);
  if (!sub.valid()) return;
  for (bool weighted : {false, true}) {
    KJTAllToAll a2a(sub, {2, 1});
    KJTAllToAllSplitsAwaitable p1 = a2a(docs_example(sub.rank(), weighted));
    KJTAllToAllTensorsAwaitable p2 = p1.wait();
    // phase 1: per destination [lengths, values] = [6, 5] to rank 0, [3, 2] to rank 1
    need_eq(p2.input_splits("lengths"), V{6, 3}, sub, "lengths input splits");
    need_eq(p2.input_splits("values"), V{5, 2}, sub, "values input splits");
    need_eq(p2.stride_per_rank(), V{3, 3}, sub, "stride per rank");
    const KeyedJaggedTensor out = p2.wait();
    need(out.has_weights() == weighted, sub, "weightedness kept");
    if (sub.rank() == 0) {
      need_eq(p2.output_splits("lengths"), V{6, 6}, sub, "lengths output splits");
      need_eq(p2.output_splits("values"), V{5, 5}, sub, "values output splits");
      need(*p2.recat() == V{0, 2, 1, 3}, sub, "recat [0, 2, 1, 3]");
      need(out.keys() == Keys{"A", "B"}, sub, "keys A, B");
      need(out.stride() == 6, sub, "stride 6");
      need_eq(key_lengths(out, "A"), V{1, 0, 2, 1, 1, 0}, sub, "A lengths");
      need_eq(key_lengths(out, "B"), V{0, 1, 1, 0, 1, 2}, sub, "B lengths");
      need_eq(iv(out.values()), V{100, 101, 102, 103, 104, 200, 201, 202, 203, 204}, sub, "values");
    } else {
      need_eq(p2.output_splits("lengths"), V{3, 3}, sub, "lengths output splits");
      need_eq(p2.output_splits("values"), V{2, 2}, sub, "values output splits");
      need(out.keys() == Keys{"C"}, sub, "key C");
      need_eq(iv(out.lengths()), V{1, 1, 0, 1, 1, 0}, sub, "C lengths");
      need_eq(iv(out.values()), V{300, 301, 302, 303}, sub, "C values");
    }
    if (weighted) {
      const V ids = iv(out.values());
      const std::vector<double> w = dv(out.weights());
      for (size_t i = 0; i < ids.size(); ++i) need(w[i] == ids[i] / 1000.0, sub, "weight follows its id");
    }
    // a second wait of either phase returns the same, without another collective
    need_eq(iv(p1.wait().wait().values()), iv(out.values()), sub, "idempotent waits");
  }
}

KJT_CASE("KJTAllToAll: stagger orders the sources (W / local_size: node-major)", "[kjt_a2a][recat]", 2, 3, 4) {
  const int W = g.size(), me = g.rank();
  // one key per destination; source s has stride 1 and sends id 10*s + destination
  V values;
  for (int d = 0; d < W; ++d) values.push_back(10 * me + d);
  const KeyedJaggedTensor in = KeyedJaggedTensor::from_lengths_sync(make_keys(W), i64(values), i64(V(W, 1)));
  for (int stagger = 1; stagger <= W; ++stagger) {
    if (W % stagger) continue;
    const KeyedJaggedTensor out = KJTAllToAll(g, V(W, 1), stagger)(in).wait().wait();
    V want;
    for (int s : source_order(W, stagger)) want.push_back(10 * s + me);
    need_eq(iv(out.values()), want, g, "stagger " + std::to_string(stagger) + " source order");
    if (W == 4 && stagger == 2) need_eq(want, V{me, 20 + me, 10 + me, 30 + me}, g, "sources 0, 2, 1, 3");
  }
}

KJT_CASE("KJTAllToAll: unequal batch sizes and a variable stride per key", "[kjt_a2a][recat]", 2, 3) {
  Group sub = first_ranks(g, 2);
  if (!sub.valid()) return;
  const int me = sub.rank();
  // unequal batches: rank 0 has 2 samples, rank 1 has 3; keys x -> rank 0, y -> rank 1
  KeyedJaggedTensor in = me == 0 ? KeyedJaggedTensor::from_lengths_sync({"x", "y"}, i64({1, 2, 3}), i64({1, 0, 2, 0}))
                                 : KeyedJaggedTensor::from_lengths_sync({"x", "y"}, i64({4, 5, 6, 7}),
                                                                        i64({0, 1, 1, 1, 0, 1}));
  KJTAllToAllTensorsAwaitable p2 = KJTAllToAll(sub, {1, 1})(in).wait();
  KeyedJaggedTensor out = p2.wait();
  need_eq(p2.stride_per_rank(), V{2, 3}, sub, "stride per rank");
  need(out.stride() == 5, sub, "stride 5");
  need_eq(iv(out.lengths()), me == 0 ? V{1, 0, 0, 1, 1} : V{2, 0, 1, 0, 1}, sub, "lengths");
  need_eq(iv(out.values()), me == 0 ? V{1, 4, 5} : V{2, 3, 6, 7}, sub, "values");
  // VBE: rank 0: x 1 sample [1], y 2 samples [2], [3]; rank 1: x 2 samples [4], [], y 1 sample [5, 6]
  in = me == 0 ? KeyedJaggedTensor::from_lengths_sync({"x", "y"}, i64({1, 2, 3}), i64({1, 1, 1}), {},
                                                      std::nullopt, std::vector<V>{{1}, {2}})
               : KeyedJaggedTensor::from_lengths_sync({"x", "y"}, i64({4, 5, 6}), i64({1, 0, 2}), {},
                                                      std::nullopt, std::vector<V>{{2}, {1}});
  p2 = KJTAllToAll(sub, {2, 0})(in).wait();
  out = p2.wait();
  need(p2.stride_per_rank().empty(), sub, "no stride per rank under VBE");
  need_eq(p2.input_splits("strides"), V{2, 0}, sub, "strides input splits");
  if (me == 0) {
    need(out.variable_stride_per_key(), sub, "VBE kept");
    need(out.stride_per_key_per_rank() == std::vector<V>{{1, 2}, {2, 1}}, sub, "stride_per_key_per_rank");
    need_eq(key_lengths(out, "x"), V{1, 1, 0}, sub, "x lengths");
    need_eq(key_values(out, "x"), V{1, 4}, sub, "x values");
    need_eq(key_lengths(out, "y"), V{1, 1, 2}, sub, "y lengths");
    need_eq(key_values(out, "y"), V{2, 3, 5, 6}, sub, "y values");
  } else {
    need(out.num_keys() == 0, sub, "no keys on rank 1");
  }
}

KJT_CASE("KJTAllToAll: a finished exchange keeps nothing alive once its awaitables are gone",
         "[kjt_a2a][lifetime]", 2, 3) {
  // Regression: the state held the phase-2 awaitable, which holds the state, so every call's
  // buffers (input, staging, the received KJT) leaked and each call page-faulted fresh memory.
  const int W = g.size();
  const KeyedJaggedTensor kjt = KeyedJaggedTensor::from_lengths_sync(
      make_keys(2 * W), i64(V(static_cast<size_t>(4 * W), g.rank())), i64(V(static_cast<size_t>(4 * W), 1)));
  Tensor values;
  {
    KJTAllToAllSplitsAwaitable p1 = KJTAllToAll(g, V(W, 2))(kjt);
    KJTAllToAllTensorsAwaitable p2 = p1.wait();
    values = p2.wait().values();
    need(p1.wait().wait().values().shares_storage_with(values), g, "idempotent waits");
  }
  barrier(g).wait();
  need(values.owns_storage_alone(), g, "the received values are held by nothing else");
  need(kjt.values().owns_storage_alone(), g, "the input's values are held by nothing else");
}

KJT_CASE("KJTAllToAll: W = 1 returns the input", "[kjt_a2a]", 1, 2) {
  Group one = g.split(g.rank(), 0);
  const KeyedJaggedTensor in = docs_example(0, true);
  KJTAllToAllTensorsAwaitable p2 = KJTAllToAll(one, {3})(in).wait();
  const KeyedJaggedTensor out = p2.wait();
  need(out.values().shares_storage_with(in.values()), one, "the very same KJT");
  need_eq(p2.stride_per_rank(), V{3}, one, "stride per rank");
  need_eq(p2.output_splits("values"), V{7}, one, "splits");
  bool threw = false;
  try {
    KJTAllToAll(one, {2})(in).wait();
  } catch (const InvalidArgument& e) {
    threw = std::string(e.what()).find("key splits [2] sum to 2 but the KJT has 3 keys") != std::string::npos;
  }
  need(threw, one, "W = 1 still checks the splits");
}

KJT_CASE("KJTAllToAll: both phases return before the peers arrive", "[kjt_a2a][async]", 2, 3) {
  Group sub = first_ranks(g, 2);
  if (!sub.valid()) return;
  // Shown by ordering, not timing: rank 1 launches only after rank 0's launch returned, and
  // issues phase 2 only after rank 0's phase-1 wait returned. Should either of rank 0's calls
  // wait for rank 1's later step, the two ranks would wait for each other until the deadline
  // and the case fails with TimeoutError.
  KJTAllToAll a2a(sub, {2, 1});
  Tensor token = zeros({1}, DType::Int32);
  std::optional<KJTAllToAllSplitsAwaitable> p1, p1b;
  std::optional<KJTAllToAllTensorsAwaitable> p2;
  if (sub.rank() == 0) {
    p1.emplace(a2a(docs_example(0, false)));
    p1b.emplace(a2a(docs_example(0, true)));  // batch i+1 launched too
    send(token, 1, sub, /*tag=*/1).wait();
    p2.emplace(p1->wait());  // phase 1 needs rank 1's launch (it came); phase 2 is only issued
    send(token, 1, sub, /*tag=*/2).wait();
  } else {
    recv(token, 0, sub, /*tag=*/1).wait();
    p1.emplace(a2a(docs_example(1, false)));
    p1b.emplace(a2a(docs_example(1, true)));
    recv(token, 0, sub, /*tag=*/2).wait();
    p2.emplace(p1->wait());
  }
  const KeyedJaggedTensor out = p2->wait();
  const KeyedJaggedTensor outb = p1b->wait().wait();
  need_eq(iv(out.values()), iv(outb.values()), sub, "both batches arrive");
  need(outb.has_weights() && !out.has_weights(), sub, "each its own");
  need_eq(iv(out.values()), sub.rank() == 0 ? V{100, 101, 102, 103, 104, 200, 201, 202, 203, 204} : V{300, 301, 302, 303},
          sub, "values");
}

KJT_CASE("KJTAllToAll: random KJTs: per-key order, ids preserved, the reverse exchange restores the input",
         "[kjt_a2a][property]", 1, 2, 3, 4) {
  const int W = g.size(), me = g.rank();
  for (uint64_t trial = 0; trial < 40; ++trial) {
    const RandomCase c = random_case(1000 * W + trial, W);
    const std::string at = "trial " + std::to_string(trial) + ": ";
    KJTAllToAllTensorsAwaitable p2 = KJTAllToAll(g, c.splits, c.stagger)(c.inputs[me]).wait();
    const KeyedJaggedTensor out = p2.wait();
    // per key: the sources' bags in stagger order, each source's in its own order
    int64_t k0 = 0;
    for (int j = 0; j < me; ++j) k0 += c.splits[j];
    need(static_cast<int64_t>(out.keys().size()) == c.splits[me], g, at + "my keys");
    for (int64_t t = 0; t < c.splits[me]; ++t) {
      const std::string& key = c.inputs[0].keys()[k0 + t];
      need(out.keys()[t] == key, g, at + "key order");
      V want_l, want_v;
      for (int s : source_order(W, c.stagger)) {
        for (int64_t x : key_lengths(c.inputs[s], key)) want_l.push_back(x);
        for (int64_t x : key_values(c.inputs[s], key)) want_v.push_back(x);
      }
      need_eq(key_lengths(out, key), want_l, g, at + key + " lengths");
      need_eq(key_values(out, key), want_v, g, at + key + " values");
      // (the exchange hands the result its per-key counts; they must be the values received)
      need(out.length_per_key()[t] == static_cast<int64_t>(want_v.size()), g,
           at + key + " length_per_key");
      if (c.weighted) {
        const std::vector<double> w = dv(out[key].weights());
        for (size_t i = 0; i < want_v.size(); ++i)
          need(w[i] == static_cast<double>(want_v[i] % 1000) + 0.25, g, at + "weight follows its id");
      }
    }
    need(out.lengths().dtype() == c.inputs[me].lengths().dtype(), g, at + "lengths dtype kept");
    // total ids: what every rank received adds up to what every rank sent
    Tensor n = from_vector(V{out.values().numel()});
    all_reduce(n, g).wait();
    int64_t sent = 0;
    for (const KeyedJaggedTensor& k : c.inputs) sent += k.values().numel();
    need(static_cast<int64_t>(n.get_flat(0)) == sent, g, at + "total ids preserved");
    if (!c.vbe && W > 1) {
      auto [l, v] = reverse_exchange(out, p2, g, c.stagger);
      need_eq(l, iv(c.inputs[me].lengths()), g, at + "reverse exchange: lengths");
      need_eq(v, iv(c.inputs[me].values()), g, at + "reverse exchange: values");
    }
  }
}

KJT_CASE("KJTAllToAll: row-wise input dist (bucketize, then splits [K] * W)", "[kjt_a2a][bucketize]", 1, 2, 3, 4) {
  const int W = g.size(), me = g.rank();
  std::mt19937_64 rng(77 + me);
  const V hash{10, 37, 1000};
  V block;
  for (int64_t h : hash) block.push_back((h + W - 1) / W);
  V lengths, values;
  for (int64_t t = 0; t < 3; ++t)
    for (int b = 0; b < 4; ++b) {
      lengths.push_back(static_cast<int64_t>(rng() % 5));
      for (int64_t j = 0; j < lengths.back(); ++j) values.push_back(static_cast<int64_t>(rng() % hash[t]));
    }
  const KeyedJaggedTensor in = KeyedJaggedTensor::from_lengths_sync({"a", "b", "c"}, i64(values), i64(lengths));
  BucketizedKjt bk = bucketize_kjt_before_all2all(in, W, block, true, false, std::nullopt, true);
  const KeyedJaggedTensor out = KJTAllToAll(g, V(W, 3))(bk.kjt).wait().wait();
  need(out.keys() == Keys{"a", "b", "c"}, g, "every rank gets every key");
  need(out.stride() == 4 * W, g, "every rank's samples");
  for (int64_t t = 0; t < 3; ++t)
    for (int64_t id : key_values(out, out.keys()[t]))
      need(id >= me * block[t] && id < (me + 1) * block[t], g, "id " + std::to_string(id) + " in my row block");
  Tensor n = from_vector(V{out.values().numel()});
  all_reduce(n, g).wait();
  Tensor m = from_vector(V{in.values().numel()});
  all_reduce(m, g).wait();
  need(n.get_flat(0) == m.get_flat(0), g, "ids preserved");
}

namespace {

// Runs `call` (a whole a2a) and checks that it fails on this rank with E whose message contains
// `text`; then checks the group still works with a good exchange.
template <class E, class F>
void expect_fails_everywhere(const Group& g, const std::string& what, const std::string& text, F call) {
  std::string got = "no error";
  bool at_first_wait = false;
  try {
    KJTAllToAllSplitsAwaitable p1 = call();
    at_first_wait = true;
    p1.wait().wait();
  } catch (const E& e) {
    got = e.what();
    need(at_first_wait, g, what + ": the launch must not throw (got " + got + ")");
    need(got.find(text) != std::string::npos, g, what + ": message \"" + got + "\" lacks \"" + text + "\"");
  } catch (const std::exception& e) {
    need(false, g, what + ": wrong error: " + e.what());
  }
  need(got != "no error", g, what + ": no error");
  // the group is still usable: nothing of the failed call is left in flight
  const int W = g.size();
  V values;
  for (int d = 0; d < W; ++d) values.push_back(d);
  const KeyedJaggedTensor out =
      KJTAllToAll(g, V(W, 1))(KeyedJaggedTensor::from_lengths_sync(make_keys(W), i64(values), i64(V(W, 1)))).wait().wait();
  need_eq(iv(out.values()), V(W, g.rank()), g, what + ": the next exchange works");
}

}  // namespace

KJT_CASE("KJTAllToAll: bad input fails on every rank before the payload moves", "[kjt_a2a][validation]", 2, 3, 4) {
  const int W = g.size(), me = g.rank(), last = W - 1;
  const Keys keys = make_keys(W);
  V values;
  for (int d = 0; d < W; ++d) values.push_back(100 * me + d);
  const KeyedJaggedTensor good = KeyedJaggedTensor::from_lengths_sync(keys, i64(values), i64(V(W, 1)));

  // splits that do not cover the keys, on the last rank only
  expect_fails_everywhere<InvalidArgument>(g, "uncovered keys",
                                           me == last ? "key splits" : "rank " + std::to_string(last) + " rejected its input", [&] {
    const KeyedJaggedTensor in = me == last ? KeyedJaggedTensor::from_lengths_sync(make_keys(W + 1), i64(V(W + 1, 5)), i64(V(W + 1, 1)))
                                            : good;
    return KJTAllToAll(g, V(W, 1))(in);
  });
  // keys in a different order on the last rank: every rank's message says where it ran
  const std::string here = "KJTAllToAll on rank " + std::to_string(me) + " of group " +
                           std::to_string(g.id()) + " (size " + std::to_string(W) + "): ";
  expect_fails_everywhere<MismatchError>(g, "key order", here + "ranks [" + std::to_string(last) + "] disagree with rank 0 about the keys", [&] {
    Keys k = keys;
    if (me == last) std::swap(k[0], k[1]);
    return KJTAllToAll(g, V(W, 1))(KeyedJaggedTensor::from_lengths_sync(k, i64(values), i64(V(W, 1))));
  });
  // splits disagreeing across ranks (each valid locally)
  expect_fails_everywhere<MismatchError>(g, "splits", "about the key splits", [&] {
    V s(W, 1);
    if (me == last) s = V(W, 0), s[0] = W;
    return KJTAllToAll(g, s)(good);
  });
  // weights on one rank only
  expect_fails_everywhere<MismatchError>(g, "weights", "about the KJT's layout", [&] {
    Tensor w = me == 0 ? f32(std::vector<float>(W, 1.0f)) : Tensor();
    return KJTAllToAll(g, V(W, 1))(KeyedJaggedTensor::from_lengths_sync(keys, i64(values), i64(V(W, 1)), w));
  });
  // a receiving rank over its limit: rank 0 gets W + 2 ids from the last rank
  expect_fails_everywhere<InvalidArgument>(g, "overflow", "rank 0 would receive " + std::to_string(W + 2) + " values elements", [&] {
    V l(W, 1), v = values;
    if (me == last) l[0] = 3, v.insert(v.begin(), {7, 7});
    return KJTAllToAll(g, V(W, 1), 1, {.max_recv_elements = W + 1})(KeyedJaggedTensor::from_lengths_sync(keys, i64(v), i64(l)));
  });
  // lengths and values inconsistent: the KJT itself refuses, on the calling rank, before any call
  bool refused = false;
  try {
    KeyedJaggedTensor::from_lengths_sync(keys, i64(values), i64(V(W, 2)));
  } catch (const InvalidArgument&) {
    refused = true;
  }
  need(refused, g, "inconsistent lengths/values rejected by the KJT");
  // local argument errors at construction (no collective issued)
  bool ctor = false;
  try {
    KJTAllToAll(g, V(W + 1, 0));
  } catch (const InvalidArgument& e) {
    ctor = std::string(e.what()).find("entries for a group of") != std::string::npos;
  }
  need(ctor, g, "splits of the wrong size rejected at construction");
  ctor = false;
  try {
    KJTAllToAll(g, V(W, 1), W + 1);
  } catch (const InvalidArgument& e) {
    ctor = std::string(e.what()).find("must be >= 1 and divide the group size") != std::string::npos;
  }
  need(ctor, g, "a stagger that does not divide W rejected at construction");
}
