// GradientReducer (collectives/ddp/gradient_reducer.h): averages against hand-computed ones for
// several bucket layouts and mixed dtypes, the launch of an early bucket during backward shown
// by ordering, the broadcast of initial values, the agreement check, unused parameters, no_sync
// accumulation and misuse; under mpiexec, buckets in shared memory. SPMD cases: local worlds
// here, one process per rank under mpiexec (ddp-mpi-*).
#include <ferry/autograd/function.h>
#include <ferry/autograd/ops.h>
#include <ferry/collectives/algorithm_table.h>
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/ddp/gradient_reducer.h>
#include <ferry/collectives/shm/peer_arenas.h>
#include <ferry/runtime/error.h>
#include "tests/differentiable/spmd_gradcheck.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

using namespace ferry;
using dgtest::expect;

namespace {

// Rank r's loss is sum_i sum(p_i * coefficient(r, i)), so its gradient of p_i is coefficient(r,
// i), which every rank can compute for every rank.
Tensor coefficient(int rank, size_t i, const Variable& p) {
  return uniform(p.shape(), -1.0, 1.0, 1000 + 17 * rank + i, p.dtype());
}

Variable linear_loss(const std::vector<Variable>& params, int rank,
                     const std::vector<bool>& use = {}) {
  Variable loss;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!use.empty() && !use[i]) continue;
    Variable term = sum(params[i] * Variable(coefficient(rank, i, params[i])));
    loss = loss.defined() ? loss + term : term;
  }
  return loss;
}

// The average over the ranks that use parameter i (every rank by default) of their
// coefficients, the non-users counting as zeros.
Tensor expected_average(const std::vector<Variable>& params, size_t i, int world,
                        const std::function<bool(int, size_t)>& uses = nullptr) {
  Tensor total = zeros(params[i].shape(), DType::Float64);
  for (int r = 0; r < world; ++r) {
    if (uses && !uses(r, i)) continue;
    Tensor c = coefficient(r, i, params[i]).to(DType::Float64);
    for (int64_t k = 0; k < c.numel(); ++k) total.set_flat(k, total.get_flat(k) + c.get_flat(k));
  }
  for (int64_t k = 0; k < total.numel(); ++k) total.set_flat(k, total.get_flat(k) / world);
  return total;
}

double max_abs_difference(const Tensor& a, const Tensor& b) {
  double worst = 0;
  for (int64_t k = 0; k < a.numel(); ++k) {
    worst = std::max(worst, std::abs(a.get_flat(k) - b.get_flat(k)));
  }
  return worst;
}

void expect_close(const Group& g, const Variable& p, const Tensor& want, double tolerance,
                  const std::string& what) {
  expect(p.grad().defined(), g, what + ": " + p.describe() + " has no gradient");
  const double diff = max_abs_difference(p.grad(), want);
  expect(diff <= tolerance, g,
         what + ": " + p.describe() + " differs from the hand-computed average by " +
             std::to_string(diff));
}

std::vector<Variable> float64_params(int rank) {
  // 96, 32, 400 and 32 bytes; values differ per rank (they do not matter to the gradients).
  std::vector<Variable> p;
  p.emplace_back(uniform({3, 4}, -1, 1, 10 + rank, DType::Float64), true, "a");
  p.emplace_back(uniform({4}, -1, 1, 20 + rank, DType::Float64), true, "b");
  p.emplace_back(uniform({50}, -1, 1, 30 + rank, DType::Float64), true, "c");
  p.emplace_back(uniform({2, 2}, -1, 1, 40 + rank, DType::Float64), true, "d");
  return p;
}

std::vector<std::vector<size_t>> layout(const GradientReducer& r) {
  std::vector<std::vector<size_t>> out;
  for (const GradientBucketInfo& b : r.buckets()) out.push_back(b.parameters);
  return out;
}

// Backward, finish, compare every gradient with the hand-computed average; twice, so that the
// second step shows the reducer was reset and reuses its buffers.
void check_steps(Group& g, std::vector<Variable>& params, GradientReducer& reducer,
                 double tolerance, const std::string& what) {
  for (int step = 0; step < 2; ++step) {
    linear_loss(params, g.rank()).backward();
    expect(reducer.buckets_launched() == reducer.buckets().size(), g,
           what + ": every bucket should be launched by the end of backward");
    reducer.finish();
    expect(reducer.buckets_launched() == 0, g, what + ": finish() should reset the step");
    for (size_t i = 0; i < params.size(); ++i) {
      expect_close(g, params[i], expected_average(params, i, g.size()), tolerance, what);
    }
    for (Variable& p : params) p.zero_grad();
  }
}

}  // namespace

DG_CASE("ddp: averaged gradients for one bucket, one parameter per bucket, a parameter larger "
        "than the cap",
        "[ddp]", 1, 2, 3, 4) {
  struct Layout {
    int64_t cap;
    std::vector<std::vector<size_t>> buckets;  // reverse registration order
  };
  const std::vector<Layout> layouts = {
      {int64_t{25} << 20, {{3, 2, 1, 0}}},
      {1, {{3}, {2}, {1}, {0}}},
      {0, {{3}, {2}, {1}, {0}}},
      // d (32 B) opens a bucket; c (400 B) does not fit beside it and fills one alone; b and a
      // (32 + 96 = 128 B) fill the last exactly.
      {128, {{3}, {2}, {1, 0}}},
  };
  for (const Layout& l : layouts) {
    std::vector<Variable> params = float64_params(g.rank());
    GradientReducer reducer(params, g, {.bucket_cap_bytes = l.cap});
    const std::string what = "cap " + std::to_string(l.cap);
    expect(layout(reducer) == l.buckets, g, what + ": unexpected bucket layout");
    check_steps(g, params, reducer, 1e-15, what);
  }
}

DG_CASE("ddp: where the ranks share a host, a bucket above the slots is reduced where it lies "
        "(shared memory), and averages as before",
        "[ddp]", 1, 2) {
  // One float64 bucket of 80 KB (above the shared-memory slots' 16 KiB).
  std::vector<Variable> params;
  params.emplace_back(uniform({10000}, -1, 1, 50 + g.rank(), DType::Float64), true, "w");
  GradientReducer reducer(params, g);
  const uint64_t before = detail::shm::single_copy_bytes().mapped;
  check_steps(g, params, reducer, 1e-12, "shared bucket");
  // Local worlds (ranks as threads) have no shared-memory path; mpiexec's ranks share a host.
  const bool one_host = g.size() > 1 && placement_of(g.host_layout()) == Placement::OneHost;
  const bool mapped = detail::shm::single_copy_bytes().mapped > before;
  expect(mapped == one_host, g,
         std::string("the bucket's all_reduce ") + (mapped ? "read" : "did not read") +
             " peers' gradients by mapping on " + (one_host ? "one host" : "no shared host"));
}

DG_CASE("ddp: float32 and float64 parameters go to separate buckets", "[ddp]", 1, 2, 3) {
  std::vector<Variable> params;
  params.emplace_back(uniform({5, 3}, -1, 1, 1, DType::Float32), true, "w32");
  params.emplace_back(uniform({7}, -1, 1, 2, DType::Float64), true, "v64");
  params.emplace_back(uniform({3}, -1, 1, 3, DType::Float32), true, "b32");
  params.emplace_back(uniform({2, 2}, -1, 1, 4, DType::Float64), true, "u64");
  GradientReducer reducer(params, g);
  expect(reducer.buckets().size() == 2, g, "expected one bucket per dtype");
  for (const GradientBucketInfo& b : reducer.buckets()) {
    for (size_t p : b.parameters) {
      expect(params[p].dtype() == b.dtype, g, "a bucket mixes dtypes");
    }
  }
  expect(layout(reducer) == std::vector<std::vector<size_t>>{{3, 1}, {2, 0}}, g,
         "unexpected bucket layout");
  for (int step = 0; step < 2; ++step) {
    // One loss per dtype (ops do not mix dtypes), one backward over both roots.
    backward({linear_loss(params, g.rank(), {true, false, true, false}),
              linear_loss(params, g.rank(), {false, true, false, true})});
    reducer.finish();
    for (size_t i = 0; i < params.size(); ++i) {
      const double tol = params[i].dtype() == DType::Float32 ? 1e-6 : 1e-15;
      expect(params[i].grad().dtype() == params[i].dtype(), g, "gradient dtype changed");
      expect_close(g, params[i], expected_average(params, i, g.size()), tol, "mixed dtypes");
    }
    for (Variable& p : params) p.zero_grad();
  }
}

namespace {

// Identity whose backward records what the reducer and the group had done by then.
class Probe : public Function {
 public:
  Probe(const GradientReducer& reducer, const Group& group, std::vector<size_t>& launched,
        std::vector<uint64_t>& sequence)
      : reducer_(reducer), group_(group), launched_(launched), sequence_(sequence) {}
  std::string name() const override { return "probe"; }
  std::vector<Tensor> forward(Context&, const std::vector<Tensor>& in) override { return in; }
  std::vector<Tensor> backward(Context&, const std::vector<Tensor>& grads) override {
    launched_.push_back(reducer_.buckets_launched());
    sequence_.push_back(group_.sequence_number());
    return grads;
  }

 private:
  const GradientReducer& reducer_;
  const Group& group_;
  std::vector<size_t>& launched_;
  std::vector<uint64_t>& sequence_;
};

}  // namespace

DG_CASE("ddp: the last layer's bucket is all-reduced while backward still runs (by ordering)",
        "[ddp][overlap]", 1, 2, 3) {
  // x -> probe_1 -> matmul(., w1) -> probe_2 -> matmul(., w2) -> sum. Backward runs w2's
  // matmul, probe_2, w1's matmul, probe_1: probe_2 must see bucket 0 (w2) launched, not yet
  // bucket 1 (w1); probe_1 both. The group's sequence number shows the collective was issued.
  Variable w1(uniform({4, 3}, -1, 1, 5, DType::Float64), true, "w1");
  Variable w2(uniform({3, 2}, -1, 1, 6, DType::Float64), true, "w2");
  GradientReducer reducer({w1, w2}, g, {.bucket_cap_bytes = 1});
  expect(layout(reducer) == std::vector<std::vector<size_t>>{{1}, {0}}, g, "unexpected layout");
  std::vector<size_t> launched;
  std::vector<uint64_t> sequence;
  Variable x(uniform({5, 4}, -1, 1, 7 + g.rank(), DType::Float64), true, "x");
  const uint64_t before = g.sequence_number();
  Variable h = apply(std::make_shared<Probe>(reducer, g, launched, sequence), {x})[0];
  h = matmul(h, w1);
  h = apply(std::make_shared<Probe>(reducer, g, launched, sequence), {h})[0];
  Variable loss = sum(matmul(h, w2));
  loss.backward();
  expect(launched == std::vector<size_t>{1, 2}, g,
         "probes saw " + std::to_string(launched.size() > 0 ? launched[0] : 99) + ", " +
             std::to_string(launched.size() > 1 ? launched[1] : 99) +
             " buckets launched; expected 1 (after w2's gradient) then 2");
  expect(sequence.size() == 2 && sequence[0] == before + 1 && sequence[1] == before + 2, g,
         "the all_reduce of a bucket was not issued as soon as its gradients were ready");
  reducer.finish();
  expect(w1.grad().defined() && w2.grad().defined(), g, "gradients missing after finish");
}

DG_CASE("ddp: broadcast_parameters copies the root's values to every rank", "[ddp]", 1, 2, 3,
        4) {
  for (int root : {0, g.size() - 1}) {
    std::vector<Variable> params = float64_params(g.rank());
    params.emplace_back(uniform({6}, -1, 1, 50 + g.rank(), DType::Float32), true, "e32");
    GradientReducer reducer(params, g, {.bucket_cap_bytes = 128});
    reducer.broadcast_parameters(root);
    const std::vector<Variable> reference = [&] {
      std::vector<Variable> p = float64_params(root);
      p.emplace_back(uniform({6}, -1, 1, 50 + root, DType::Float32), true, "e32");
      return p;
    }();
    for (size_t i = 0; i < params.size(); ++i) {
      expect(equal(params[i].value(), reference[i].value()), g,
             params[i].describe() + " differs from root " + std::to_string(root) + "'s value");
    }
  }
  std::vector<Variable> params = float64_params(g.rank());
  GradientReducer reducer(params, g);
  bool threw = false;
  try {
    reducer.broadcast_parameters(g.size());
  } catch (const InvalidArgument&) {
    threw = true;
  }
  expect(threw, g, "a root outside the group was accepted");
}

namespace {

// Every rank must throw MismatchError whose message contains each of `needles`.
void expect_mismatch(Group& g, const std::function<void()>& construct,
                     const std::vector<std::string>& needles) {
  std::string message;
  try {
    construct();
  } catch (const MismatchError& e) {
    message = e.what();
  }
  expect(!message.empty(), g, "no MismatchError");
  for (const std::string& n : needles) {
    expect(message.find(n) != std::string::npos, g,
           "the message lacks \"" + n + "\": " + message);
  }
}

}  // namespace

DG_CASE("ddp: ranks that register different parameters or options get MismatchError", "[ddp]",
        2, 3) {
  const int last = g.size() - 1;
  const bool odd = g.rank() == last;
  // A different shape on the last rank.
  expect_mismatch(g, [&] {
    std::vector<Variable> p = float64_params(g.rank());
    if (odd) p[2] = Variable(zeros({49}, DType::Float64), true, "c");
    GradientReducer reducer(p, g);
  }, {"rank(s) " + std::to_string(last), "parameter 2: float64[50] (c)",
      "rank " + std::to_string(last) + " has parameter 2: float64[49] (c)"});
  // A different dtype.
  expect_mismatch(g, [&] {
    std::vector<Variable> p = float64_params(g.rank());
    if (odd) p[0] = Variable(zeros({3, 4}, DType::Float32), true, "a");
    GradientReducer reducer(p, g);
  }, {"float64[3, 4] (a)", "float32[3, 4] (a)"});
  // One parameter fewer.
  expect_mismatch(g, [&] {
    std::vector<Variable> p = float64_params(g.rank());
    if (odd) p.pop_back();
    GradientReducer reducer(p, g);
  }, {"rank 0 registered 4 parameters, rank " + std::to_string(last) + " registered 3"});
  // Another bucket size.
  expect_mismatch(g, [&] {
    std::vector<Variable> p = float64_params(g.rank());
    GradientReducer reducer(p, g, {.bucket_cap_bytes = odd ? 64 : 128});
  }, {"options differ", "bucket_cap_bytes=128", "bucket_cap_bytes=64"});
  // Names may differ: only dtypes and shapes must agree. The group is still usable.
  std::vector<Variable> p = float64_params(g.rank());
  p[1].set_name("b_on_rank_" + std::to_string(g.rank()));
  GradientReducer reducer(p, g);
  check_steps(g, p, reducer, 1e-15, "after the mismatches");
}

DG_CASE("ddp: parameters without a gradient (zeros counted; find_unused_parameters)",
        "[ddp][unused]", 1, 2, 3) {
  // a: used everywhere; b: only on rank 0; c: on every rank but 0 (nowhere at W = 1); d: nowhere.
  const auto uses = [](int r, size_t i) {
    return i == 0 || (i == 1 && r == 0) || (i == 2 && r != 0);
  };
  for (bool find_unused : {false, true}) {
    std::vector<Variable> params = float64_params(g.rank());
    GradientReducer reducer(params, g,
                            {.bucket_cap_bytes = 128, .find_unused_parameters = find_unused});
    for (int step = 0; step < 2; ++step) {
      std::vector<bool> use;
      for (size_t i = 0; i < params.size(); ++i) use.push_back(uses(g.rank(), i));
      linear_loss(params, g.rank(), use).backward();
      reducer.finish();
      const std::string what = find_unused ? "find_unused_parameters" : "default";
      for (size_t i = 0; i < params.size(); ++i) {
        bool anyone = false;
        for (int r = 0; r < g.size(); ++r) anyone = anyone || uses(r, i);
        if (find_unused && !anyone) {
          expect(!params[i].grad().defined(), g,
                 what + ": " + params[i].describe() + " is unused everywhere but got a gradient");
        } else {
          expect_close(g, params[i], expected_average(params, i, g.size(), uses), 1e-15, what);
        }
      }
      for (Variable& p : params) p.zero_grad();
    }
  }
}

DG_CASE("ddp: no_sync accumulates locally, the next synchronized step reduces the sum",
        "[ddp][no_sync]", 1, 2, 3) {
  std::vector<Variable> params = float64_params(g.rank());
  GradientReducer reducer(params, g, {.bucket_cap_bytes = 128});
  const uint64_t before = g.sequence_number();
  {
    auto guard = reducer.no_sync();
    expect(!reducer.syncing(), g, "syncing inside no_sync");
    linear_loss(params, g.rank()).backward();
    reducer.finish();  // a no-op here
  }
  expect(g.sequence_number() == before, g, "no_sync communicated");
  expect(reducer.syncing(), g, "not syncing after the guard");
  // The second micro-batch's coefficients are those of rank + 100 (a different batch).
  linear_loss(params, g.rank() + 100).backward();
  reducer.finish();
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor want = expected_average(params, i, g.size());
    Tensor second = zeros(params[i].shape(), DType::Float64);
    for (int r = 0; r < g.size(); ++r) {
      Tensor c = coefficient(r + 100, i, params[i]);
      for (int64_t k = 0; k < c.numel(); ++k) second.set_flat(k, second.get_flat(k) + c.get_flat(k));
    }
    for (int64_t k = 0; k < want.numel(); ++k) {
      want.set_flat(k, want.get_flat(k) + second.get_flat(k) / g.size());
    }
    expect_close(g, params[i], want, 1e-14, "no_sync");
  }
}

DG_CASE("ddp: a second backward before finish() is refused; finish() recovers", "[ddp]", 1, 2) {
  std::vector<Variable> params = float64_params(g.rank());
  GradientReducer reducer(params, g, {.bucket_cap_bytes = 1});
  linear_loss(params, g.rank()).backward();
  std::string message;
  try {
    linear_loss(params, g.rank()).backward();
  } catch (const InvalidArgument& e) {
    message = e.what();
  }
  expect(message.find("call finish() after every backward") != std::string::npos, g,
         "the second backward was not refused: " + message);
  reducer.finish();
  for (Variable& p : params) p.zero_grad();
  check_steps(g, params, reducer, 1e-15, "after the refusal");
}

DG_CASE("ddp: bad arguments", "[ddp]", 1) {
  const auto rejects = [&](const std::function<void()>& fn, const std::string& needle) {
    std::string message;
    try {
      fn();
    } catch (const InvalidArgument& e) {
      message = e.what();
    }
    expect(message.find(needle) != std::string::npos, g,
           "expected InvalidArgument with \"" + needle + "\", got \"" + message + "\"");
  };
  Variable a(zeros({2}, DType::Float64), true, "a");
  rejects([&] { GradientReducer r({a, a}, g); }, "registered twice");
  rejects([&] { GradientReducer r({Variable(zeros({2}), false, "frozen")}, g); },
          "must be a leaf that requires grad");
  rejects([&] { GradientReducer r({a * 2.0}, g); }, "must be a leaf that requires grad");
  rejects([&] { GradientReducer r({a}, g, {.reduce_op = ReduceOp::Max}); },
          "reduce_op must be avg or sum");
  rejects([&] { GradientReducer r({a}, Group()); }, "GradientReducer: called on a null Group");
  // A destroyed reducer leaves hooks that do nothing.
  { GradientReducer r({a}, g); }
  sum(a * 3.0).backward();
  expect(a.grad().defined() && a.grad().get_flat(0) == 3.0, g, "hook of a dead reducer");
}

DG_CASE("ddp: ReduceOp::Sum adds instead of averaging", "[ddp]", 1, 2, 3) {
  std::vector<Variable> params = float64_params(g.rank());
  GradientReducer reducer(params, g, {.reduce_op = ReduceOp::Sum});
  linear_loss(params, g.rank()).backward();
  reducer.finish();
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor want = expected_average(params, i, g.size());
    for (int64_t k = 0; k < want.numel(); ++k) want.set_flat(k, want.get_flat(k) * g.size());
    expect_close(g, params[i], want, 1e-14, "sum");
  }
}

namespace {

// Local worlds only: the local transport carries each collective's fingerprint with its first
// message, so sizes that disagree fail at once on every rank. (MPI's native all_reduce does not
// compare sizes unless FERRY_CHECK=1, so the same body would not fail there.)
void failing_bucket(Group& g) {
  // On a group of its own (split from g) so that poisoning it leaves g usable. The last rank
  // issues an all_reduce of another size where the others reduce their bucket: the sizes
  // disagree, every rank's collective fails (MismatchError, or PeerFailure from a peer that
  // gave up), and the reducer's finish() rethrows it.
  Group sub = g.split(0, g.rank());
  std::vector<Variable> params = float64_params(g.rank());
  GradientReducer reducer(params, sub);  // one bucket of 62 float64
  std::string error;
  try {
    if (g.rank() == g.size() - 1) {
      Tensor other = zeros({7}, DType::Float64);
      all_reduce(other, sub, ReduceOp::Avg).wait();
    } else {
      linear_loss(params, g.rank()).backward();
      expect(reducer.buckets_launched() == 1, g, "the bucket was not launched in backward");
      reducer.finish();
    }
  } catch (const Error& e) {
    error = e.what();
  }
  expect(!error.empty(), g, "the disagreeing collectives did not fail");
  expect(reducer.buckets_launched() == 0, g, "finish() did not reset the step after a failure");
  expect(sub.poisoned(), g, "the failed group is not poisoned");
  // The next step fails at once on the poisoned group, on every rank.
  bool failed = false;
  try {
    reducer.finish();
  } catch (const Error&) {
    failed = true;
  }
  expect(failed, g, "finish() on a poisoned group did not fail");
  barrier(g).wait();  // g itself is fine
}

}  // namespace

TEST_CASE("ddp: a bucket's collective failing comes out of finish(), which resets the step",
          "[ddp][errors]") {
  for (int world : {2, 3}) {
    INFO("world size " << world);
    dgtest::run_local(world, failing_bucket);
  }
}
