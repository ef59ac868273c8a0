// Hand-computed two-rank torchrec cases (pooled all-to-all, reduce-scatter, all-gather; the docs examples of torchrec's PooledEmbeddingsAllToAll
// and VariableBatchPooledEmbeddingsAllToAll) and hand-computed cases for alltoall_sequence and
// alltoallv, each forward and backward with gradient division on and off, on the ranks they
// specify. SPMD cases: local worlds here, mpiexec / ferry-run in the torchrec-mpi-* /
// torchrec-ucx-* suites.
#include <ferry/autograd/function.h>
#include <ferry/autograd/ops.h>
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/engine/group_impl.h>
#include <ferry/collectives/torchrec/torchrec.h>
#include "tests/torchrec/comm_test_helpers.h"
#include "tests/differentiable/spmd_gradcheck.h"

using namespace ferry;
using namespace ferry::torchrec;
using dgtest::expect;
using trtest::expect_equal;
using trtest::forward_backward;
using trtest::mat;
using trtest::with_gradient_division;

DG_CASE("torchrec worked case: alltoall_pooled, equal batch, division on and off", "[torchrec][worked]",
        2) {
  const bool r0 = g.rank() == 0;
  const Tensor x = r0 ? mat({1, 2, 3, 4}, 2, 2) : mat({5, 6}, 2, 1);
  const Tensor grad = r0 ? mat({10, 20, 30}, 1, 3) : mat({40, 50, 60}, 1, 3);
  const All2AllPooledInfo info({1, 1}, {2, 1});
  auto op = [&](const Variable& v) { return alltoall_pooled(v, info, g).wait(); };
  for (bool division : {true, false}) {
    with_gradient_division(g, division, [&] {
      const auto r = forward_backward(op, x, grad);
      expect_equal(r.outputs[0], r0 ? mat({1, 2, 5}, 1, 3) : mat({3, 4, 6}, 1, 3), g, "alltoall_pooled Y");
      const Tensor dx = division ? (r0 ? mat({5, 10, 20, 25}, 2, 2) : mat({15, 30}, 2, 1))
                                 : (r0 ? mat({10, 20, 40, 50}, 2, 2) : mat({30, 60}, 2, 1));
      expect_equal(r.input_grads[0], dx, g, division ? "alltoall_pooled dX (division on)" : "alltoall_pooled dX (off)");
    });
  }
}

DG_CASE("torchrec alltoall_pooled, PooledEmbeddingsAllToAll's docs example: dims [2, 1], six "
        "rows each -> [3, 3] on both ranks",
        "[torchrec][alltoall_pooled]", 2) {
  const bool r0 = g.rank() == 0;
  const int64_t d = r0 ? 2 : 1;
  Tensor x = arange(0, 6.0 * d, 1, DType::Float64).reshape({6, d});
  x.vec<double>().array() += 100 * g.rank();
  const All2AllPooledInfo info({3, 3}, {2, 1});
  const Tensor y = alltoall_pooled(Variable(x), info, g).wait().value();
  // Rank me gets rows 3 me .. 3 me + 2 of rank 0's [6, 2] and of rank 1's [6, 1], side by side.
  const double b = 3 * g.rank();
  expect_equal(y,
               mat({2 * b, 2 * b + 1, 100 + b, 2 * b + 2, 2 * b + 3, 101 + b, 2 * b + 4,
                    2 * b + 5, 102 + b},
                   3, 3),
               g, "docs example output");
}

// A gather's output is where its peers write their blocks: on one host, above the shared-memory
// path's slots, it lies in shared memory (they write it by mapping); elsewhere, and below, in
// ordinary memory. Right values either way.
DG_CASE("torchrec all_gather_base_pooled receives into shared memory on one host",
        "[torchrec][all_gather_base_pooled]", 2) {
  for (int64_t n : {int64_t{16}, int64_t{8192}}) {  // 64 B, 32 KiB of float32 per rank
    Tensor x = full({n}, 1.0 + g.rank());
    const Tensor y = all_gather_base_pooled(Variable(x), g).wait().value();
    const bool want_shared = n * 4 > 16 * 1024 && g.impl().one_host();
    expect(y.is_shared() == want_shared, g,
           "output of " + std::to_string(n) + " floats per rank: is_shared " +
               std::to_string(y.is_shared()) + ", expected " + std::to_string(want_shared));
    expect(y.numel() == 2 * n && y.get_flat(0) == 1.0 && y.get_flat(2 * n - 1) == 2.0, g,
           "gathered values");
  }
}

DG_CASE("torchrec worked case: reduce_scatter_base_pooled", "[torchrec][worked]", 2) {
  const bool r0 = g.rank() == 0;
  const Tensor x = r0 ? mat({1, 2, 3, 4}, 2, 2) : mat({10, 20, 30, 40}, 2, 2);
  const Tensor grad = r0 ? mat({1, 1}, 1, 2) : mat({2, 2}, 1, 2);
  auto op = [&](const Variable& v) { return reduce_scatter_base_pooled(v, g).wait(); };
  for (bool division : {true, false}) {
    with_gradient_division(g, division, [&] {
      const auto r = forward_backward(op, x, grad);
      expect_equal(r.outputs[0], r0 ? mat({11, 22}, 1, 2) : mat({33, 44}, 1, 2), g, "reduce_scatter_base_pooled Y");
      expect_equal(r.input_grads[0],
                   division ? mat({0.5, 0.5, 1, 1}, 2, 2) : mat({1, 1, 2, 2}, 2, 2), g,
                   "reduce_scatter_base_pooled dX");
    });
  }
}

DG_CASE("torchrec worked case: all_gather_base_pooled and reduce_scatter_pooled", "[torchrec][worked]",
        2) {
  const bool r0 = g.rank() == 0;
  {
    const Tensor x = r0 ? mat({1, 2}, 1, 2) : mat({3, 4}, 1, 2);
    const Tensor grad = r0 ? mat({1, 2, 3, 4}, 2, 2) : mat({10, 20, 30, 40}, 2, 2);
    const auto r = forward_backward(
        [&](const Variable& v) { return all_gather_base_pooled(v, g).wait(); }, x, grad);
    expect_equal(r.outputs[0], mat({1, 2, 3, 4}, 2, 2), g, "all_gather_base_pooled Y");
    expect_equal(r.input_grads[0], r0 ? mat({5.5, 11}, 1, 2) : mat({16.5, 22}, 1, 2), g,
                 "all_gather_base_pooled dX");
  }
  {
    const std::vector<Tensor> inputs =
        r0 ? std::vector<Tensor>{mat({1, 2}, 1, 2), mat({3, 4}, 1, 2)}
           : std::vector<Tensor>{mat({10, 20}, 1, 2), mat({30, 40}, 1, 2)};
    const Tensor grad = r0 ? mat({1, 2}, 1, 2) : mat({3, 4}, 1, 2);
    const auto r = forward_backward(
        [&](const std::vector<Variable>& in) {
          return std::vector<Variable>{reduce_scatter_pooled(in, g).wait()};
        },
        inputs, {grad});
    expect_equal(r.outputs[0], r0 ? mat({11, 22}, 1, 2) : mat({33, 44}, 1, 2), g,
                 "reduce_scatter_pooled Y");
    expect_equal(r.input_grads[0], mat({0.5, 1}, 1, 2), g, "reduce_scatter_pooled d inputs[0]");
    expect_equal(r.input_grads[1], mat({1.5, 2}, 1, 2), g, "reduce_scatter_pooled d inputs[1]");
  }
}

DG_CASE("torchrec variable_batch_alltoall_pooled, VariableBatchPooledEmbeddingsAllToAll's docs "
        "example: splits and sizes",
        "[torchrec][variable_batch]", 2) {
  // Rank 0 owns f0 (dim 2); rank 1 owns f1, f2 (dim 3 each).
  const bool r0 = g.rank() == 0;
  using Lists = std::vector<std::vector<int64_t>>;
  const VariableBatchAll2AllPooledInfo info(
      r0 ? Lists{{2}, {1}} : Lists{{1, 3}, {2, 2}},
      r0 ? std::vector<int64_t>{2, 1, 3} : std::vector<int64_t>{1, 2, 2}, {{2}, {3, 3}});
  // Input splits r0 [4, 2], r1 [12, 12]; values 1000 r + index, so each block is recognisable.
  const int64_t n = r0 ? 6 : 24;
  Tensor x = arange(0, static_cast<double>(n), 1, DType::Float64);
  x.vec<double>().array() += 1000 * g.rank();
  const Tensor grad_seed = arange(0, r0 ? 16.0 : 14.0, 1, DType::Float64);
  const auto r = forward_backward(
      [&](const Variable& v) { return variable_batch_alltoall_pooled(v, info, g).wait(); }, x,
      grad_seed);
  // Output r0: rank 0's first 4, then rank 1's first 12 (16); r1: rank 0's last 2, rank 1's
  // last 12 (14).
  std::vector<double> expected;
  if (r0) {
    for (int i = 0; i < 4; ++i) expected.push_back(i);
    for (int i = 0; i < 12; ++i) expected.push_back(1000 + i);
  } else {
    for (int i = 4; i < 6; ++i) expected.push_back(i);
    for (int i = 12; i < 24; ++i) expected.push_back(1000 + i);
  }
  expect_equal(r.outputs[0], from_vector(expected), g, "VBE output");
  // Backward (division on): the seeds go back, halved: rank 0's x gets r0's seeds 0..3 and
  // r1's 0..1; rank 1's x gets r0's 4..15 and r1's 2..13.
  std::vector<double> dx;
  if (r0) {
    for (int i = 0; i < 4; ++i) dx.push_back(i / 2.0);
    for (int i = 0; i < 2; ++i) dx.push_back(i / 2.0);
  } else {
    for (int i = 4; i < 16; ++i) dx.push_back(i / 2.0);
    for (int i = 2; i < 14; ++i) dx.push_back(i / 2.0);
  }
  expect_equal(r.input_grads[0], from_vector(dx), g, "VBE dX");
}

// Rank 0 owns features f0, f1; rank 1 none (T = 0: no permutation). One sample per rank.
// Rank 0 received f0: 1 id from rank 0 (e00), 1 from rank 1 (e01); f1: 2 from rank 0 (e10,
// e11), none from rank 1. Its rows, in KJT order, are e00 e01 e10 e11; forward_recat [0, 2, 1,
// 3] sends e00 e10 e11 back to rank 0 and e01 to rank 1.
DG_CASE("torchrec alltoall_sequence: recat forward, inverse backward, T = 0 on one rank",
        "[torchrec][alltoall_sequence]", 2) {
  const bool r0 = g.rank() == 0;
  All2AllSequenceInfo info;
  info.embedding_dim = 2;
  if (r0) {
    info.lengths_after_sparse_data_all2all = from_vector<int64_t>({1, 1, 2, 0}, {2, 2});
    info.forward_recat_tensor = sequence_forward_recat(2, 2);
    info.backward_recat_tensor = sequence_backward_recat(2, 2);
    info.output_splits = {3, 1};
    info.input_splits = {3, 0};
  } else {
    info.lengths_after_sparse_data_all2all = from_vector<int64_t>({}, {0, 2});
    info.forward_recat_tensor = sequence_forward_recat(0, 2);
    info.backward_recat_tensor = sequence_backward_recat(0, 2);
    info.output_splits = {0, 0};
    info.input_splits = {1, 0};
  }
  expect_equal(sequence_forward_recat(2, 2), from_vector<int64_t>({0, 2, 1, 3}), g,
               "forward recat T=2 W=2");
  const Tensor e = r0 ? mat({1, 2, 3, 4, 5, 6, 7, 8}, 4, 2) : mat({}, 0, 2);
  const Tensor grad = r0 ? mat({10, 20, 30, 40, 50, 60}, 3, 2) : mat({70, 80}, 1, 2);
  for (bool division : {true, false}) {
    with_gradient_division(g, division, [&] {
      const auto r = forward_backward(
          [&](const Variable& v) { return alltoall_sequence(v, info, g).wait(); }, e, grad);
      expect_equal(r.outputs[0], r0 ? mat({1, 2, 5, 6, 7, 8}, 3, 2) : mat({3, 4}, 1, 2), g,
                   "sequence Y");
      const double s = division ? 0.5 : 1.0;
      expect_equal(r.input_grads[0],
                   r0 ? mat({10 * s, 20 * s, 70 * s, 80 * s, 30 * s, 40 * s, 50 * s, 60 * s}, 4, 2)
                      : mat({}, 0, 2),
                   g, "sequence dE");
    });
  }
}

// The same exchange with row-wise sharding's callback appended: the rows come out in the
// order of the unbucketize permutation, and the gradient goes back through it.
DG_CASE("torchrec alltoall_sequence: the unbucketize permutation as a callback",
        "[torchrec][alltoall_sequence]", 2) {
  const bool r0 = g.rank() == 0;
  All2AllSequenceInfo info;
  info.embedding_dim = 2;
  info.lengths_after_sparse_data_all2all = r0 ? from_vector<int64_t>({1, 1, 2, 0}, {2, 2})
                                              : from_vector<int64_t>({}, {0, 2});
  info.forward_recat_tensor = sequence_forward_recat(r0 ? 2 : 0, 2);
  info.backward_recat_tensor = sequence_backward_recat(r0 ? 2 : 0, 2);
  info.output_splits = r0 ? std::vector<int64_t>{3, 1} : std::vector<int64_t>{0, 0};
  info.input_splits = r0 ? std::vector<int64_t>{3, 0} : std::vector<int64_t>{1, 0};
  const Tensor perm = r0 ? from_vector<int64_t>({2, 0, 1}) : from_vector<int64_t>({0});
  const Tensor e = r0 ? mat({1, 2, 3, 4, 5, 6, 7, 8}, 4, 2) : mat({}, 0, 2);
  const Tensor grad = r0 ? mat({10, 20, 30, 40, 50, 60}, 3, 2) : mat({70, 80}, 1, 2);
  const auto r = forward_backward(
      [&](const Variable& v) {
        Awaitable<Variable> req = alltoall_sequence(v, info, g);
        req.callbacks().push_back(unbucketize_permute_callback(perm));
        return req.wait();
      },
      e, grad);
  expect_equal(r.outputs[0], r0 ? mat({7, 8, 1, 2, 5, 6}, 3, 2) : mat({3, 4}, 1, 2), g,
               "permuted Y");
  // Rank 0's output row k is exchange row perm[k]: row 2 got G[0], row 0 G[1], row 1 G[2].
  expect_equal(r.input_grads[0],
               r0 ? mat({15, 20, 35, 40, 25, 30, 5, 10}, 4, 2) : mat({}, 0, 2), g,
               "gradient through the permutation");
}

// Rank 0 holds tables A [3, 1] and B [3, 2]; rank 1 holds C [3, 1]; B_global 3 -> rows [2, 1].
DG_CASE("torchrec alltoallv: tuple output, columns split back, no division on the async path",
        "[torchrec][alltoallv]", 2) {
  const bool r0 = g.rank() == 0;
  const std::vector<Tensor> inputs =
      r0 ? std::vector<Tensor>{mat({1, 2, 3}, 3, 1), mat({10, 11, 20, 21, 30, 31}, 3, 2)}
         : std::vector<Tensor>{mat({100, 200, 300}, 3, 1)};
  const std::vector<Tensor> grads =
      r0 ? std::vector<Tensor>{mat({1, 2, 3, 4, 5, 6}, 2, 3), mat({7, 8}, 2, 1)}
         : std::vector<Tensor>{mat({9, 10, 11}, 1, 3), mat({12}, 1, 1)};
  const std::vector<int64_t> out_split{3, 1};
  std::vector<Variable> tables;
  for (const Tensor& t : inputs) tables.emplace_back(t);
  const All2AllVInfo info = all2allv_info(tables, g, out_split);
  expect(info.B_local_list == std::vector<int64_t>{2, 1} && info.B_local == (r0 ? 2 : 1), g,
         "B_local_list");
  auto op = [&](const std::vector<Variable>& in) { return alltoallv(in, g, out_split).wait(); };
  for (bool sync : {false, true}) {
    UseSyncCollectivesScope scope(sync);
    const auto r = forward_backward(op, inputs, grads);
    expect_equal(r.outputs[0], r0 ? mat({1, 10, 11, 2, 20, 21}, 2, 3) : mat({3, 30, 31}, 1, 3),
                 g, "alltoallv output 0");
    expect_equal(r.outputs[1], r0 ? mat({100, 200}, 2, 1) : mat({300}, 1, 1), g,
                 "alltoallv output 1");
    // Division is on (the default): the async path ignores it, the sync path divides.
    const double s = sync ? 0.5 : 1.0;
    if (r0) {
      expect_equal(r.input_grads[0], mat({1 * s, 4 * s, 9 * s}, 3, 1), g, "alltoallv dA");
      expect_equal(r.input_grads[1], mat({2 * s, 3 * s, 5 * s, 6 * s, 10 * s, 11 * s}, 3, 2), g,
                   "alltoallv dB");
    } else {
      expect_equal(r.input_grads[0], mat({7 * s, 8 * s, 12 * s}, 3, 1), g, "alltoallv dC");
    }
  }
}

DG_CASE("torchrec group size 1: every op but alltoallv returns its input, no node",
        "[torchrec][world1]", 1) {
  const Variable x(mat({1, 2, 3, 4}, 2, 2), true);
  auto same = [&](Awaitable<Variable> a, const char* op) {
    expect(a.wait().impl() == x.impl(), g, std::string(op) + ": not the input itself");
  };
  All2AllSequenceInfo seq;
  seq.embedding_dim = 2;
  seq.input_splits = {2};
  seq.output_splits = {2};
  for (bool sync : {false, true}) {
    UseSyncCollectivesScope scope(sync);
    same(alltoall_pooled(x, All2AllPooledInfo({2}, {2}), g), "alltoall_pooled");
    same(variable_batch_alltoall_pooled(x, VariableBatchAll2AllPooledInfo({{2}}, {2}, {{2}}), g),
         "variable_batch_alltoall_pooled");
    same(alltoall_sequence(x, seq, g), "alltoall_sequence");
    same(reduce_scatter_pooled({x}, g), "reduce_scatter_pooled");
    same(reduce_scatter_base_pooled(x, g), "reduce_scatter_base_pooled");
    same(reduce_scatter_v_pooled(x, {2}, g), "reduce_scatter_v_pooled");
    same(reduce_scatter_v_per_feature_pooled(x, {{2}}, {2}, g),
         "reduce_scatter_v_per_feature_pooled");
    same(all_gather_base_pooled(x, g), "all_gather_base_pooled");
    // alltoallv's output is the input tables side by side: it runs, and records its nodes.
    const std::vector<Variable> y = alltoallv({x}, g, std::vector<int64_t>{2}).wait();
    expect(y.size() == 1 && y[0].impl() != x.impl() && !y[0].is_leaf(), g,
           "alltoallv at W = 1 runs the op");
    expect_equal(y[0].value(), x.value(), g, "alltoallv at W = 1");
  }
}

namespace {

// Identity whose backward runs `on_backward` first: a point in the backward's order.
class Marker final : public Function {
 public:
  explicit Marker(std::function<void()> on_backward) : on_backward_(std::move(on_backward)) {}
  std::string name() const override { return "marker"; }
  std::vector<Tensor> forward(Context&, const std::vector<Tensor>& in) override {
    return {in[0].clone()};
  }
  std::vector<Tensor> backward(Context&, const std::vector<Tensor>& grads) override {
    on_backward_();
    return {grads[0]};
  }

 private:
  std::function<void()> on_backward_;
};

Variable marker(const Variable& x, std::function<void()> on_backward) {
  return apply(std::make_shared<Marker>(std::move(on_backward)), {x})[0];
}

}  // namespace

// Backward runs the Wait node (launching the gradient collective), then what was recorded
// between the call and wait(), then the Req node (completing it). Rank 0 sends a token only
// once its gradient collective completed (a marker recorded before the call); rank 1 waits for
// that token in a marker recorded between its call and wait(). That only finishes if rank 1's
// gradient collective was in flight while its marker ran.
DG_CASE("torchrec ops: the gradient collective is in flight while the nodes between call "
        "and wait run", "[torchrec][awaitable][overlap]", 2) {
  const bool r0 = g.rank() == 0;
  const Tensor token = zeros({1}, DType::Float64);
  auto send_token = [&] { send(token, 1, g, 11).wait(); };
  auto recv_token = [&] {
    Tensor t = token.clone();
    recv(t, 0, g, 11).wait();
  };
  auto nothing = [] {};
  using Op = std::function<Awaitable<Variable>(const Variable&)>;
  const std::vector<Op> ops{
      [&](const Variable& v) { return alltoall_pooled(v, All2AllPooledInfo({1, 1}, {2, 2}), g); },
      [&](const Variable& v) { return reduce_scatter_base_pooled(v, g); },
      [&](const Variable& v) { return all_gather_base_pooled(v, g); }};
  for (const Op& op : ops) {
    Variable x(mat({1, 2, 3, 4}, 2, 2), true);
    Variable before = r0 ? marker(x, send_token) : marker(x, nothing);
    Awaitable<Variable> req = op(before);
    Variable between = marker(Variable(zeros({1}, DType::Float64), true),
                              r0 ? std::function<void()>(nothing) : recv_token);
    Variable y = req.wait();
    ferry::backward({sum(y), sum(between)});
    expect(x.grad().defined(), g, "no gradient");
  }
}
