// The embedding dists (dist_data.py's output dists): forward on hand-computed two-rank cases (pooled all-to-all, reduce-scatter, all-gather,
// torchrec's docstring examples of the two pooled all-to-alls) and hand-computed ones, callbacks in
// order, every module's backward through the distributed gradcheck (float64, W = 1..4), the
// input-dist -> lookup -> output-dist round trip of sequence sharding (table-wise, unequal batches,
// row-wise with the unbucketize permutation) and bad input. SPMD cases: local worlds in
// test_torchrec, mpiexec / ferry-run in the torchrec-{mpi,ucx}-* suites.
#include <ferry/autograd/ops.h>
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/torchrec/torchrec.h>
#include "tests/torchrec/comm_test_helpers.h"
#include "tests/differentiable/spmd_gradcheck.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <sstream>

using namespace ferry;
using namespace ferry::torchrec;
using dgtest::expect;
using trtest::check_op;
using trtest::expect_equal;
using trtest::expect_invalid;
using trtest::forward_backward;
using trtest::Fn;
using trtest::mat;
using trtest::rank_input;
using trtest::with_gradient_division;
using V = std::vector<int64_t>;

namespace {

Fn pooled(const std::function<PooledEmbeddingsAwaitable(const Variable&)>& f) {
  return [f](const std::vector<Variable>& in) { return std::vector<Variable>{f(in[0]).wait()}; };
}

// Concatenation through a stream (GCC 12's -Wrestrict misfires on "lit" + std::to_string(n)).
template <class... A>
std::string cat_str(const A&... a) {
  std::ostringstream os;
  (os << ... << a);
  return os.str();
}

int64_t total(const V& v) {
  int64_t n = 0;
  for (int64_t x : v) n += x;
  return n;
}

// The deterministic "embedding" of id v of key t: [v, 0.5 v + t, -v - 1].
constexpr int64_t kDim = 3;
std::vector<double> emb_row(int64_t v, int64_t t) {
  return {static_cast<double>(v), 0.5 * static_cast<double>(v) + static_cast<double>(t),
          -static_cast<double>(v) - 1};
}

// A random KJT (seeded by rank and salt): keys k0..k{K-1}, `stride` samples, bags of 0-4 ids
// below hash[t].
KeyedJaggedTensor random_kjt(int64_t K, int64_t stride, const V& hash, uint64_t seed) {
  std::mt19937_64 rng(seed);
  V lengths, values;
  std::vector<std::string> keys;
  for (int64_t t = 0; t < K; ++t) {
    keys.push_back(cat_str("k", t));
    for (int64_t b = 0; b < stride; ++b) {
      lengths.push_back(static_cast<int64_t>(rng() % 5));
      for (int64_t j = 0; j < lengths.back(); ++j)
        values.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(hash[t])));
    }
  }
  return KeyedJaggedTensor::from_lengths_sync(keys, from_vector(values), from_vector(lengths),
                                              Tensor(), stride);
}

// Key index of every value of a KJT (values are key-major).
V key_of_values(const KeyedJaggedTensor& kjt) {
  V out;
  const V lpk = kjt.length_per_key();
  for (size_t t = 0; t < lpk.size(); ++t) out.insert(out.end(), static_cast<size_t>(lpk[t]), static_cast<int64_t>(t));
  return out;
}

// [N, kDim] float64: emb_row(global_id(i), key_index(i)) for every value i.
Tensor lookup(const V& ids, const V& keys) {
  std::vector<double> rows;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::vector<double> r = emb_row(ids[i], keys[i]);
    rows.insert(rows.end(), r.begin(), r.end());
  }
  return from_vector<double>(rows, {static_cast<int64_t>(ids.size()), kDim});
}

V values_of(const KeyedJaggedTensor& kjt) { return kjt.values().to_vector<int64_t>(); }

}  // namespace

// ---- PooledEmbeddingsAllToAll ----

DG_CASE("embedding dists: PooledEmbeddingsAllToAll on the two-rank worked case (equal default batch), division on "
        "and off",
        "[torchrec][dists][pooled_a2a]", 2) {
  const bool r0 = g.rank() == 0;
  const Tensor x = r0 ? mat({1, 2, 3, 4}, 2, 2) : mat({5, 6}, 2, 1);
  const Tensor grad = r0 ? mat({10, 20, 30}, 1, 3) : mat({40, 50, 60}, 1, 3);
  const PooledEmbeddingsAllToAll dist(g, {2, 1});
  auto op = [&](const Variable& v) { return dist.forward(v).wait(); };
  for (bool division : {true, false}) {
    with_gradient_division(g, division, [&] {
      const auto r = forward_backward(op, x, grad);
      expect_equal(r.outputs[0], r0 ? mat({1, 2, 5}, 1, 3) : mat({3, 4, 6}, 1, 3), g, "pooled all-to-all Y");
      const Tensor dx = division ? (r0 ? mat({5, 10, 20, 25}, 2, 2) : mat({15, 30}, 2, 1))
                                 : (r0 ? mat({10, 20, 40, 50}, 2, 2) : mat({30, 60}, 2, 1));
      expect_equal(r.input_grads[0], dx, g, "pooled all-to-all dX");
    });
  }
}

DG_CASE("embedding dists: PooledEmbeddingsAllToAll, torchrec's docs example and explicit batch "
        "sizes",
        "[torchrec][dists][pooled_a2a]", 2) {
  const int me = g.rank();
  const int64_t d = me == 0 ? 2 : 1;
  Tensor x = arange(0, 6.0 * d, 1, DType::Float64).reshape({6, d});
  x.vec<double>().array() += 100 * me;
  const PooledEmbeddingsAllToAll dist(g, {2, 1});
  const Tensor y = dist(Variable(x)).wait().value();
  const double b = 3 * me;
  expect_equal(y,
               mat({2 * b, 2 * b + 1, 100 + b, 2 * b + 2, 2 * b + 3, 101 + b, 2 * b + 4,
                    2 * b + 5, 102 + b},
                   3, 3),
               g, "docs example: [3, 3] on both ranks");
  // Explicit unequal batch sizes: rank 0 owns 4 samples, rank 1 owns 2.
  const Tensor y2 = dist(Variable(x), V{4, 2}).wait().value();
  expect(y2.shape() == Shape{me == 0 ? 4 : 2, 3}, g, "batch_size_per_rank {4, 2}");
  expect(y2.get_flat(2) == 100 + 4.0 * me, g, "rank 1's column of my first sample");
}

DG_CASE("embedding dists: PooledEmbeddingsAllToAll callbacks run in order, then the "
        "awaitable's own",
        "[torchrec][dists][pooled_a2a][callbacks]", 1, 2, 3) {
  const int W = g.size();
  std::vector<std::string> trace;
  PooledEmbeddingsAllToAll dist(g, V(W, 1), {[&](Variable y) {
                                               trace.push_back("first");
                                               return y * 2.0;
                                             }});
  dist.callbacks().push_back([&](Variable y) {
    trace.push_back("second");
    return y + 1.0;
  });
  Tensor x = full({W, 1}, static_cast<double>(g.rank() + 1), DType::Float64);
  PooledEmbeddingsAwaitable a = dist.forward(Variable(x));
  a.then([&](Variable y) {
    trace.push_back("third");
    return y * 10.0;
  });
  dist.callbacks().push_back([&](Variable y) {  // too late for `a`
    trace.push_back("late");
    return y;
  });
  const Tensor y = a.wait().value();
  expect(trace == std::vector<std::string>{"first", "second", "third"}, g,
         "callbacks: module's in order, then the awaitable's");
  std::vector<double> want;
  for (int i = 0; i < W; ++i) want.push_back(((i + 1) * 2.0 + 1) * 10);
  expect_equal(y, from_vector<double>(want, {1, W}), g, "((x * 2) + 1) * 10");
}

DG_CASE("embedding dists: column-wise output dist with the permute callback, and gradcheck",
        "[torchrec][dists][pooled_a2a][gradcheck]", 1, 2, 3, 4) {
  const int W = g.size(), me = g.rank();
  // Rank i holds one column shard of width 1 + i % 2; the callback reverses the blocks.
  V dims, perm;
  for (int i = 0; i < W; ++i) dims.push_back(1 + i % 2), perm.push_back(W - 1 - i);
  const PooledEmbeddingsAllToAll dist(g, dims, {permute_pooled_embs_callback(
                                                   PermutePooledEmbeddingsSplit(dims, perm))});
  const int64_t B = 2;
  Tensor x = zeros({B * W, dims[me]}, DType::Float64);
  for (int64_t r = 0; r < B * W; ++r)
    for (int64_t c = 0; c < dims[me]; ++c) x.data<double>()[r * dims[me] + c] = 100 * me + 10 * r + c;
  const Tensor y = dist(Variable(x)).wait().value();
  // Row b of mine: source blocks in reverse rank order; block of source i holds its row me*B + b.
  std::vector<double> want;
  for (int64_t b = 0; b < B; ++b)
    for (int i = W - 1; i >= 0; --i)
      for (int64_t c = 0; c < dims[i]; ++c) want.push_back(100 * i + 10 * (me * B + b) + c);
  expect_equal(y, from_vector<double>(want, {B, total(dims)}), g, "permuted column blocks");
  // Uneven batches with a zero, through the gradcheck.
  V batch;
  for (int j = 0; j < W; ++j) batch.push_back((2 * j + 1) % 3);
  check_op(g, "PooledEmbeddingsAllToAll (permuted, uneven batches)",
           pooled([&](const Variable& v) { return dist.forward(v, batch); }),
           {rank_input({total(batch), dims[me]}, g)});
}

DG_CASE("embedding dists: PooledEmbeddingsAllToAll permuting in the exchange gives the permute "
        "callback's values and gradients bit for bit (float32, uneven batches, division on and "
        "off, fp16 codec)",
        "[torchrec][dists][pooled_a2a][permute_in_exchange]", 1, 2, 3, 4) {
  const int W = g.size(), me = g.rank();
  // Rank i holds 1 + i % 3 blocks of widths 16, 3 and 16 (one rank none when W = 4: its
  // dim_sum is 0); the permutation is a shuffle with a fixed seed, the same on every rank.
  V dims, dim_sum(static_cast<size_t>(W), 0);
  const V widths = {16, 3, 16};
  for (int i = 0; i < W; ++i) {
    const int blocks = i == 3 ? 0 : 1 + i % 3;
    for (int k = 0; k < blocks; ++k) {
      dims.push_back(widths[static_cast<size_t>(k)]);
      dim_sum[static_cast<size_t>(i)] += widths[static_cast<size_t>(k)];
    }
  }
  V perm(dims.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(7));
  const PermutePooledEmbeddingsSplit permute(dims, perm);
  V batch;
  for (int j = 0; j < W; ++j) batch.push_back((2 * j + 3) % 4);
  const int64_t rows = total(batch), out_rows = batch[static_cast<size_t>(me)];
  std::mt19937 rng(100 + me);
  std::uniform_real_distribution<float> u(-1, 1);
  Tensor x = empty({rows, dim_sum[static_cast<size_t>(me)]}, DType::Float32);
  Tensor grad = empty({out_rows, total(dims)}, DType::Float32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = u(rng);
  for (int64_t i = 0; i < grad.numel(); ++i) grad.data<float>()[i] = u(rng);
  QuantizedCommCodecs fp16;
  fp16.forward = std::make_shared<FbgemmQuantizedCommCodec>(CommType::FP16);
  fp16.backward = std::make_shared<FbgemmQuantizedCommCodec>(CommType::FP16);
  for (const Codecs& codecs : {Codecs(std::nullopt), Codecs(fp16)}) {
    const PooledEmbeddingsAllToAll as_callback(g, dim_sum, {permute_pooled_embs_callback(permute)},
                                               codecs);
    PooledEmbeddingsAllToAll in_exchange(g, dim_sum, {}, codecs);
    in_exchange.permute_in_exchange(permute);
    for (bool division : {true, false}) {
      with_gradient_division(g, division, [&] {
        const std::string what = cat_str(codecs ? "fp16" : "no codec",
                                         division ? ", division on" : ", division off");
        const auto want = forward_backward(
            [&](const Variable& v) { return as_callback.forward(v, batch).wait(); }, x, grad);
        const auto got = forward_backward(
            [&](const Variable& v) { return in_exchange.forward(v, batch).wait(); }, x, grad);
        expect_equal(got.outputs[0], want.outputs[0], g, "Y, " + what);
        expect_equal(got.input_grads[0], want.input_grads[0], g, "dX, " + what);
      });
    }
  }
  // Blocks that do not split the ranks' columns are refused when the permutation is given.
  PooledEmbeddingsAllToAll other(g, dim_sum);
  V wider = dims;
  wider.back() += 1;
  V order(wider.size());
  std::iota(order.begin(), order.end(), 0);
  expect_invalid([&] { other.permute_in_exchange(PermutePooledEmbeddingsSplit(wider, order)); },
                 {"alltoall_pooled_in_order", "do not"}, g, "blocks wider than the ranks' columns");
}

DG_CASE("embedding dists: VariableBatchPooledEmbeddingsAllToAll, torchrec's docs example and "
        "gradcheck",
        "[torchrec][dists][vb_a2a][gradcheck]", 1, 2, 3, 4) {
  const int w = g.size(), me = g.rank();
  if (w == 2) {
    // r0 owns f0 (dim 2); r1 owns f1, f2 (dim 3). Output sizes 16 and 14.
    const VariableBatchPooledEmbeddingsAllToAll dist(g, {{2}, {3, 3}});
    const auto bsrf = me == 0 ? std::vector<V>{{2}, {1}} : std::vector<V>{{1, 3}, {2, 2}};
    const V pre = me == 0 ? V{2, 1, 3} : V{1, 2, 2};
    const int64_t in = me == 0 ? 6 : 24;
    Tensor x = arange(0, static_cast<double>(in), 1, DType::Float64);
    x.vec<double>().array() += 1000 * me;
    const Tensor y = dist(Variable(x), bsrf, pre).wait().value();
    expect(y.numel() == (me == 0 ? 16 : 14), g, "docs example output sizes 16 / 14");
    // Rank 1 receives r0's last 2 elements (4, 5) then r1's last 12 (1012..1023).
    if (me == 1) expect(y.get_flat(0) == 4 && y.get_flat(2) == 1012, g, "block order");
  }
  std::vector<V> dims_all;
  for (int i = 0; i < w; ++i) {
    V dims;
    for (int f = 0; f <= i % 2; ++f) dims.push_back(1 + (i + f) % 2);
    dims_all.push_back(dims);
  }
  std::vector<V> bsrf(static_cast<size_t>(w));
  V pre;
  int64_t elements = 0;
  for (int i = 0; i < w; ++i)
    for (size_t f = 0; f < dims_all[me].size(); ++f) {
      bsrf[i].push_back((i + static_cast<int64_t>(f) + me) % 3);
      elements += bsrf[i].back() * dims_all[me][f];
    }
  for (int i = 0; i < w; ++i)
    for (size_t f = 0; f < dims_all[i].size(); ++f) pre.push_back((me + static_cast<int64_t>(f) + i) % 3);
  const VariableBatchPooledEmbeddingsAllToAll dist(g, dims_all);
  check_op(g, "VariableBatchPooledEmbeddingsAllToAll",
           pooled([&](const Variable& v) { return dist.forward(v, bsrf, pre); }),
           {rank_input({elements}, g)});
}

// ---- reduce-scatter / all-gather ----

DG_CASE("embedding dists: PooledEmbeddingsReduceScatter on the two-rank worked case (base) and unequal splits (v)",
        "[torchrec][dists][reduce_scatter]", 2) {
  const bool r0 = g.rank() == 0;
  const PooledEmbeddingsReduceScatter dist(g);
  const Tensor x = r0 ? mat({1, 2, 3, 4}, 2, 2) : mat({10, 20, 30, 40}, 2, 2);
  const Tensor grad = r0 ? mat({1, 1}, 1, 2) : mat({2, 2}, 1, 2);
  for (const std::optional<V>& splits : {std::optional<V>(), std::optional<V>(V{1, 1})}) {
    const auto r = forward_backward([&](const Variable& v) { return dist(v, splits).wait(); }, x, grad);
    expect_equal(r.outputs[0], r0 ? mat({11, 22}, 1, 2) : mat({33, 44}, 1, 2), g, "reduce-scatter Y");
    expect_equal(r.input_grads[0], mat({0.5, 0.5, 1, 1}, 2, 2), g, "reduce-scatter dX (division on)");
  }
  // Unequal splits [2, 1]: rank 0 gets rows 0-1 summed, rank 1 row 2.
  const Tensor x3 = r0 ? mat({1, 2, 3}, 3, 1) : mat({10, 20, 30}, 3, 1);
  const Tensor y3 = dist(Variable(x3), V{2, 1}).wait().value();
  expect_equal(y3, r0 ? mat({11, 22}, 2, 1) : mat({33}, 1, 1), g, "v: splits [2, 1]");
  // No splits and 3 rows: the base collective, which needs W | rows.
  expect_invalid([&] { dist(Variable(x3)).wait(); }, {"reduce_scatter_base_pooled", "3"}, g,
                 "base without splits");
}

DG_CASE("embedding dists: reduce-scatter, variable-batch reduce-scatter and all-gather "
        "gradcheck",
        "[torchrec][dists][reduce_scatter][gradcheck]", 1, 2, 3, 4) {
  const int w = g.size(), me = g.rank();
  const PooledEmbeddingsReduceScatter rs(g);
  V splits;
  for (int j = 0; j < w; ++j) splits.push_back((j + 1) % 3);
  check_op(g, "PooledEmbeddingsReduceScatter (v)",
           pooled([&](const Variable& v) { return rs(v, splits); }),
           {rank_input({total(splits), 2}, g)});
  check_op(g, "PooledEmbeddingsReduceScatter (base)",
           pooled([&](const Variable& v) { return rs(v, V(w, 2)); }), {rank_input({2 * w, 3}, g)});
  const VariableBatchPooledEmbeddingsReduceScatter vrs(g);
  const V dims{2, 1};
  std::vector<V> bsrf;
  int64_t n = 0;
  for (int r = 0; r < w; ++r) {
    bsrf.push_back({r % 2, (r + 1) % 3});
    n += bsrf.back()[0] * dims[0] + bsrf.back()[1] * dims[1];
  }
  check_op(g, "VariableBatchPooledEmbeddingsReduceScatter",
           pooled([&](const Variable& v) { return vrs(v, bsrf, dims); }), {rank_input({n}, g)});
  const PooledEmbeddingsAllGather ag(g);
  check_op(g, "PooledEmbeddingsAllGather", pooled([&](const Variable& v) { return ag(v); }),
           {rank_input({2, 3}, g, me)});
}

DG_CASE("embedding dists: VariableBatchPooledEmbeddingsReduceScatter and "
        "PooledEmbeddingsAllGather by hand",
        "[torchrec][dists][reduce_scatter][all_gather]", 2) {
  const bool r0 = g.rank() == 0;
  // dims [2, 1]; rank 0 needs 1 sample of f0 and 0 of f1 (2 elements), rank 1 1 of each (3).
  const VariableBatchPooledEmbeddingsReduceScatter vrs(g);
  Tensor x = from_vector<double>(r0 ? std::vector<double>{1, 2, 3, 4, 5}
                                    : std::vector<double>{10, 20, 30, 40, 50});
  const Tensor y = vrs(Variable(x), {{1, 0}, {1, 1}}, {2, 1}).wait().value();
  expect_equal(y, from_vector<double>(r0 ? std::vector<double>{11, 22} : std::vector<double>{33, 44, 55}),
               g, "per-feature reduce-scatter");
  const PooledEmbeddingsAllGather ag(g);
  const Tensor xa = r0 ? mat({1, 2}, 1, 2) : mat({3, 4}, 1, 2);
  const Tensor ga = r0 ? mat({1, 2, 3, 4}, 2, 2) : mat({10, 20, 30, 40}, 2, 2);
  const auto r = forward_backward([&](const Variable& v) { return ag(v).wait(); }, xa, ga);
  expect_equal(r.outputs[0], mat({1, 2, 3, 4}, 2, 2), g, "all-gather Y");
  expect_equal(r.input_grads[0], r0 ? mat({5.5, 11}, 1, 2) : mat({16.5, 22}, 1, 2), g, "all-gather dX");
}

// ---- SequenceEmbeddingsAllToAll: input dist -> lookup -> output dist ----

DG_CASE("embedding dists: KJTAllToAll -> per-id lookup -> SequenceEmbeddingsAllToAll returns "
        "each rank its own ids' embeddings in order (table-wise, uneven features)",
        "[torchrec][dists][sequence][round_trip]", 1, 2, 3, 4) {
  const int W = g.size(), me = g.rank();
  V features_per_rank;
  for (int j = 0; j < W; ++j) features_per_rank.push_back(j % 3 == 1 ? 0 : 1 + j % 2);
  const int64_t K = total(features_per_rank);
  const V hash(static_cast<size_t>(K), 1000);
  for (uint64_t salt = 0; salt < 3; ++salt) {
    const KeyedJaggedTensor kjt = random_kjt(K, 3, hash, 31 * salt + me);
    KJTAllToAllTensorsAwaitable p2 = KJTAllToAll(g, features_per_rank)(kjt).wait();
    const KeyedJaggedTensor mine = p2.wait();
    // The key index inside `mine` is local; make it global for the check.
    V local_keys = key_of_values(mine);
    int64_t k0 = 0;
    for (int j = 0; j < me; ++j) k0 += features_per_rank[j];
    for (int64_t& t : local_keys) t += k0;
    const Tensor eg = lookup(values_of(mine), local_keys);
    const SequenceEmbeddingsAllToAll out_dist(g, features_per_rank);
    const Tensor back = out_dist(Variable(eg), mine.lengths(), p2.input_splits("values"),
                                 p2.output_splits("values"))
                            .wait()
                            .value();
    expect_equal(back, lookup(values_of(kjt), key_of_values(kjt)), g,
                 cat_str("my ids' embeddings in my order (salt ", salt, ")"));
    if (salt == 0)
      check_op(g, "SequenceEmbeddingsAllToAll",
               trtest::one([&](const Variable& v) {
                 return static_cast<Awaitable<Variable>>(out_dist(
                     v, mine.lengths(), p2.input_splits("values"), p2.output_splits("values")));
               }),
               {rank_input({mine.values().numel(), kDim}, g)});
  }
}

DG_CASE("embedding dists: SequenceEmbeddingsAllToAll round trip with unequal batch sizes "
        "(per-sample recat)",
        "[torchrec][dists][sequence][round_trip][variable_batch]", 1, 2, 3, 4) {
  const int W = g.size(), me = g.rank();
  V features_per_rank;
  for (int j = 0; j < W; ++j) features_per_rank.push_back(1 + (j + 1) % 2);
  const int64_t K = total(features_per_rank);
  const KeyedJaggedTensor kjt = random_kjt(K, 1 + me, V(static_cast<size_t>(K), 50), 500 + me);
  KJTAllToAllTensorsAwaitable p2 = KJTAllToAll(g, features_per_rank)(kjt).wait();
  const KeyedJaggedTensor mine = p2.wait();
  int64_t k0 = 0;
  for (int j = 0; j < me; ++j) k0 += features_per_rank[j];
  V keys = key_of_values(mine);
  for (int64_t& t : keys) t += k0;
  const SequenceEmbeddingsAllToAll out_dist(g, features_per_rank);
  const Tensor sfr = sequence_sparse_features_recat(p2);
  auto run = [&](const Variable& v) {
    return static_cast<Awaitable<Variable>>(out_dist(v, mine.lengths(), p2.input_splits("values"),
                                                     p2.output_splits("values"), std::nullopt,
                                                     p2.stride_per_rank(), sfr));
  };
  expect_equal(run(Variable(lookup(values_of(mine), keys))).wait().value(),
               lookup(values_of(kjt), key_of_values(kjt)), g, "my ids' embeddings in my order");
  check_op(g, "SequenceEmbeddingsAllToAll (variable batch)", trtest::one(run),
           {rank_input({mine.values().numel(), kDim}, g)});
  if (W > 1)
    expect_invalid(
        [&] {
          out_dist(Variable(lookup(values_of(mine), keys)), mine.lengths(),
                   p2.input_splits("values"), p2.output_splits("values"), std::nullopt,
                   p2.stride_per_rank());
        },
        {"SequenceEmbeddingsAllToAll", "sparse_features_recat"}, g,
        "unequal batches without the per-sample recat");
}

DG_CASE("embedding dists: row-wise sequence round trip: bucketize, KJTAllToAll, lookup of my "
        "row block, SequenceEmbeddingsAllToAll + unbucketize permute",
        "[torchrec][dists][sequence][round_trip][row_wise]", 1, 2, 3, 4) {
  const int W = g.size(), me = g.rank();
  const V hash{10, 37, 1000};
  V block;
  for (int64_t h : hash) block.push_back((h + W - 1) / W);
  const KeyedJaggedTensor kjt = random_kjt(3, 4, hash, 77 + me);
  BucketizedKjt bk = bucketize_kjt_before_all2all(kjt, W, block, /*output_permute=*/true);
  KJTAllToAllTensorsAwaitable p2 = KJTAllToAll(g, V(W, 3))(bk.kjt).wait();
  const KeyedJaggedTensor mine = p2.wait();
  // Rank me holds rows [me * block, (me + 1) * block) of every table: the global row of a local id.
  V ids = values_of(mine);
  const V keys = key_of_values(mine);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] += me * block[static_cast<size_t>(keys[i])];
  const SequenceEmbeddingsAllToAll out_dist(g, V(W, 3));
  std::vector<std::string> trace;
  SequenceEmbeddingsAwaitable a =
      out_dist(Variable(lookup(ids, keys)), mine.lengths(), p2.input_splits("values"),
               p2.output_splits("values"), bk.unbucketize_permute);
  a.then([&](Variable y) {
    trace.push_back("after unbucketize");
    return y;
  });
  expect_equal(a.wait().value(), lookup(values_of(kjt), key_of_values(kjt)), g,
               "original ids' embeddings in the original order");
  expect(trace.size() == 1, g, "the awaitable's callback ran once");
  check_op(g, "SequenceEmbeddingsAllToAll (row-wise, unbucketize)",
           trtest::one([&](const Variable& v) {
             return static_cast<Awaitable<Variable>>(out_dist(v, mine.lengths(),
                                                              p2.input_splits("values"),
                                                              p2.output_splits("values"),
                                                              bk.unbucketize_permute));
           }),
           {rank_input({mine.values().numel(), kDim}, g)});
}

// ---- bad input ----

DG_CASE("embedding dists: bad input fails with a clear InvalidArgument before any data moves",
        "[torchrec][dists][validation]", 2, 3) {
  const int W = g.size(), me = g.rank();
  expect_invalid([&] { PooledEmbeddingsAllToAll(g, V(W + 1, 1)); },
                 {"PooledEmbeddingsAllToAll", "dim_sum_per_rank", "entries"}, g, "dims size");
  expect_invalid([&] { PooledEmbeddingsAllToAll(g, V(W, -1)); }, {"negative"}, g, "negative dim");
  const PooledEmbeddingsAllToAll dist(g, V(W, 2));
  expect_invalid([&] { dist(Variable(zeros({W + 1, 2}, DType::Float64))); },
                 {"PooledEmbeddingsAllToAll", "not divisible by W", cat_str(W + 1)}, g,
                 "B_g % W != 0");
  expect_invalid([&] { dist(Variable(zeros({W, 3}, DType::Float64))); },
                 {"3 columns", cat_str("dim_sum_per_rank[", me, "] is 2")}, g,
                 "wrong columns");
  expect_invalid([&] { dist(Variable(zeros({W}, DType::Float64))); }, {"2-D"}, g, "1-D input");
  expect_invalid([&] { dist(Variable(zeros({W, 2}, DType::Float64)), V(W, 7)); },
                 {"alltoall_pooled"}, g, "batch sizes that do not add up");
  expect_invalid([&] { SequenceEmbeddingsAllToAll(g, V(W - 1, 1)); },
                 {"SequenceEmbeddingsAllToAll", "features_per_rank"}, g, "features size");
  expect_invalid([&] { VariableBatchPooledEmbeddingsAllToAll(g, std::vector<V>(W + 1, V{1})); },
                 {"VariableBatchPooledEmbeddingsAllToAll", "lists"}, g, "vb dims size");
  expect_invalid([&] { SequenceEmbeddingsAwaitable(Awaitable<Variable>(), std::nullopt, 1); },
                 {"SequenceEmbeddingsAwaitable", "empty"}, g, "empty awaitable");
  // The group still works: a good call after the bad ones.
  const Tensor y = dist(Variable(full({W, 2}, 1.0, DType::Float64))).wait().value();
  expect(y.shape() == Shape{1, 2 * W}, g, "a good call afterwards");
}
