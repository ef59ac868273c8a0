// The asynchronous all_to_all_single (collectives/differentiable/all_to_all_async.h) on the
// Req/Wait core (req_wait.h): the distributed gradcheck at world sizes 1-4 with uneven and zero
// splits; the same bits as the blocking op; overlap shown by ordering; a dropped request; a rank
// whose loss ignores the output. SPMD cases: local worlds here, mpiexec / UCX in tests/mpi and
// tests/ucx.
#include <ferry/autograd/function.h>
#include <ferry/autograd/grad_mode.h>
#include <ferry/autograd/ops.h>
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/differentiable.h>
#include <ferry/collectives/differentiable/all_to_all_async.h>
#include <ferry/collectives/run_ranks.h>
#include <ferry/runtime/config.h>
#include "spmd_gradcheck.h"
#include "tests/collectives/test_helpers.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <latch>
#include <numeric>
#include <thread>

using namespace ferry;
using dgtest::check;
using dgtest::expect;

namespace {

Tensor rank_input(const Shape& shape, int rank) {
  return uniform(shape, -1.0, 1.0, 500 + rank, DType::Float64);
}

// Rank me sends (2 me + j) % 3 rows to rank j and receives (2 k + me) % 3 from rank k: uneven,
// with zeros, and the two lists differ (a backward that forgot to swap them is caught).
struct Splits {
  std::vector<int64_t> in, out;
  int64_t sent = 0;
};
Splits uneven_splits(const Group& g) {
  Splits s;
  for (int j = 0; j < g.size(); ++j) {
    s.in.push_back((2 * g.rank() + j) % 3);
    s.out.push_back((2 * j + g.rank()) % 3);
  }
  s.sent = std::accumulate(s.in.begin(), s.in.end(), int64_t{0});
  return s;
}

// Input elements over all ranks for uneven_splits with `cols` columns.
int64_t uneven_elements(const Group& g, int64_t cols) {
  int64_t n = 0;
  for (int k = 0; k < g.size(); ++k)
    for (int j = 0; j < g.size(); ++j) n += cols * ((2 * k + j) % 3);
  return n;
}

// Waits without testing, waiting for or otherwise moving anything, until `flag` of the
// request's stage is set by whoever drives the collective (a group worker or the progress
// thread). The bound only turns a regression into a failure instead of a hang.
bool seen_without_driving(const AsyncRequest<Variable>& req, bool ReqWaitStage::*flag) {
  const auto until = std::chrono::steady_clock::now() + default_timeout();
  while (!(req.stage().*flag)) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

// Whether waiting for `req` throws InvalidArgument saying `why`.
bool wait_refused(AsyncRequest<Variable>& req, const std::string& why) {
  try {
    req.wait();
  } catch (const InvalidArgument& e) {
    return std::string(e.what()).find(why) != std::string::npos;
  }
  return false;
}

// Identity, recorded between a request's Req and Wait. Its forward and backward check where the
// request stands, then sleep until the request's collective (forward, resp. gradient) finished
// with nobody waiting for it: the collective was in flight while this node ran, and moved.
class Probe final : public Function {
 public:
  Probe(AsyncRequest<Variable> req, Group g) : req_(std::move(req)), g_(std::move(g)) {}
  std::string name() const override { return "probe"; }

  std::vector<Tensor> forward(Context&, const std::vector<Tensor>& in) override {
    const ReqWaitStage s = req_.stage();
    expect(s.launched && !s.waited, g_, "forward: the probe ran outside the request's flight");
    expect(seen_without_driving(req_, &ReqWaitStage::completed), g_,
           "forward: the all_to_all did not finish while nobody waited for it");
    expect(!req_.stage().waited, g_, "forward: the request was waited for meanwhile");
    return {in[0].clone()};
  }
  std::vector<Tensor> backward(Context&, const std::vector<Tensor>& g) override {
    const ReqWaitStage s = req_.stage();
    // The Wait node ran (launched the gradient all_to_all), the Req node did not yet.
    expect(s.gradient_launched && !s.gradient_waited, g_,
           "backward: the gradient all_to_all was not in flight when the probe ran");
    expect(seen_without_driving(req_, &ReqWaitStage::gradient_completed), g_,
           "backward: the gradient all_to_all did not finish while nobody waited for it");
    expect(!req_.stage().gradient_waited, g_, "backward: the Req node ran before the probe");
    ++backward_runs;
    return {g[0]};
  }

  std::atomic<int> backward_runs{0};

 private:
  AsyncRequest<Variable> req_;
  Group g_;
};

}  // namespace

DG_CASE("all_to_all_single_async: distributed gradcheck, equal blocks and uneven / zero splits",
        "[req_wait][all_to_all]", 1, 2, 3, 4) {
  for (int64_t rows : {0, 1, 2}) {
    check(g, [&](const Variable& v) { return all_to_all_single_async(v, g).wait(); },
          rank_input({rows * g.size(), 2}, g.rank()), g.size() * g.size() * rows * 2);
  }
  const Splits s = uneven_splits(g);
  check(g, [&](const Variable& v) { return all_to_all_single_async(v, s.out, s.in, g).wait(); },
        rank_input({s.sent, 3}, g.rank()), uneven_elements(g, 3));
}

DG_CASE("all_to_all_single_async: two requests in flight at once, waited for in reverse order",
        "[req_wait][all_to_all]", 1, 2, 3, 4) {
  const Splits s = uneven_splits(g);
  check(g, [&](const Variable& v) {
    AsyncRequest<Variable> first = all_to_all_single_async(v, s.out, s.in, g);
    AsyncRequest<Variable> second = all_to_all_single_async(mul(v, v), s.out, s.in, g);
    Variable y2 = second.wait();
    Variable y1 = first.wait();
    return add(y1, mul(y2, 3.0));
  }, rank_input({s.sent, 2}, g.rank()), uneven_elements(g, 2));
}

DG_CASE("all_to_all_single_async: a second backward under retain_graph runs both halves again",
        "[req_wait][all_to_all]", 1, 2, 3) {
  Variable x(rank_input({2 * g.size(), 2}, g.rank()), true, "x");
  Variable y = all_to_all_single_async(x, g).wait();
  Variable loss = sum(mul(y, 2.0));
  loss.backward(Tensor(), /*retain_graph=*/true);
  loss.backward();
  expect(equal(x.grad(), full(x.shape(), 4.0, DType::Float64)), g, "dx is " + x.grad().to_string());
}

DG_CASE("all_to_all_single_async gives the blocking op's values and gradients bit for bit",
        "[req_wait][all_to_all]", 1, 2, 3, 4) {
  const Splits s = uneven_splits(g);
  for (DType dtype : {DType::Float64, DType::Float32}) {
    for (bool split : {false, true}) {
      const Shape shape = split ? Shape{s.sent, 3} : Shape{2 * g.size(), 3};
      const Tensor x0 = uniform(shape, -1.0, 1.0, 900 + g.rank(), dtype);
      Variable xb(x0.clone(), true, "xb"), xa(x0.clone(), true, "xa");
      Variable yb = split ? all_to_all_single(xb, s.out, s.in, g) : all_to_all_single(xb, g);
      AsyncRequest<Variable> req =
          split ? all_to_all_single_async(xa, s.out, s.in, g) : all_to_all_single_async(xa, g);
      Variable ya = req.wait();
      expect(equal(ya.value(), yb.value()), g, "the outputs differ");
      const Tensor grad = uniform(yb.shape(), -1.0, 1.0, 950 + g.rank(), dtype);
      yb.backward(grad);
      ya.backward(grad);
      expect(equal(xa.grad(), xb.grad()), g, "the gradients differ");
    }
  }
}

DG_CASE("all_to_all_single_async: callbacks run in order at wait and are differentiated",
        "[req_wait][all_to_all]", 2, 3) {
  Variable x(rank_input({2 * g.size(), 2}, g.rank()), true, "x");
  AsyncRequest<Variable> req = all_to_all_single_async(x, g);
  req.then([](Variable y) { return mul(y, 2.0); }).then([](Variable y) { return add(y, 1.0); });
  Variable y = req.wait();
  Variable plain = all_to_all_single(x, g);
  expect(equal(y.value(), add(mul(plain, 2.0), 1.0).value()), g, "callbacks out of order");
  sum(y).backward();
  // d/dx of sum(2 a2a(x) + 1) is 2 everywhere (an all_to_all only moves rows).
  expect(equal(x.grad(), full(x.shape(), 2.0, DType::Float64)), g, "dx is " + x.grad().to_string());
  // A request is waited for once.
  expect(wait_refused(req, "waited for already"), g, "a second wait was not refused");
}

DG_CASE("all_to_all_single_async: the collectives are in flight, and move, while a node "
        "recorded between Req and Wait runs (forward and backward)",
        "[req_wait][all_to_all][overlap]", 1, 2, 3, 4) {
  for (int64_t rows : {int64_t{1}, int64_t{40000}}) {  // 40000 x 2 doubles: 640 KB a block
    Variable x(rank_input({rows * g.size(), 2}, g.rank()), true, "x");
    Variable other(rank_input({3}, 70 + g.rank()), true, "other");
    AsyncRequest<Variable> req = all_to_all_single_async(x, g);
    auto probe = std::make_shared<Probe>(req, g);
    Variable h = apply(probe, {other})[0];  // recorded between Req and Wait
    Variable y = req.wait();
    Variable loss = add(sum(mul(y, 3.0)), sum(h));
    loss.backward();
    expect(probe->backward_runs.load() == 1, g, "the probe's backward did not run once");
    expect(equal(x.grad(), full(x.shape(), 3.0, DType::Float64)), g, "wrong dx");
    expect(equal(other.grad(), full(other.shape(), 1.0, DType::Float64)), g, "wrong d other");
    const ReqWaitStage s = req.stage();
    expect(s.waited && s.gradient_waited, g, "the request did not finish both halves");
  }
}

DG_CASE("all_to_all_single_async: a request dropped before its wait still takes part in both "
        "collectives", "[req_wait][all_to_all][dropped]", 1, 2, 3, 4) {
  // The last rank drops its request; the others use y with dL/dy = rank + 1. Rank k's dx block
  // j is rank j's gradient for the rows it got from k: (j + 1), or 0 from the dropping rank.
  const int me = g.rank(), last = g.size() - 1;
  const int64_t m = 2;
  Variable x(rank_input({m * g.size(), 2}, me), true, "x");
  Variable loss;
  if (me == last) {
    {
      AsyncRequest<Variable> dropped = all_to_all_single_async(x, g);
    }
    loss = sum(mul(x, 0.0));  // recorded after the drop, so backward forces it
  } else {
    AsyncRequest<Variable> req = all_to_all_single_async(x, g);
    Variable y = req.wait();
    // The forward moved the dropping rank's rows too: block k of y is rank k's block me.
    for (int k = 0; k < g.size(); ++k) {
      const Tensor sent = rank_input({m * g.size(), 2}, k).narrow(0, me * m, m);
      expect(equal(y.value().narrow(0, k * m, m), sent), g, "wrong rows from rank " + std::to_string(k));
    }
    loss = sum(mul(y, me + 1.0));
  }
  loss.backward();
  for (int j = 0; j < g.size(); ++j) {
    const double want = j == last ? 0.0 : j + 1.0;
    expect(equal(x.grad().narrow(0, j * m, m), full({m, 2}, want, DType::Float64)), g,
           "block " + std::to_string(j) + " of dx is " + x.grad().to_string());
  }
}

DG_CASE("all_to_all_single_async: a request that records nothing moves the data, and may be "
        "dropped unwaited", "[req_wait][all_to_all][unrecorded]", 1, 2, 3) {
  // Under NoGradGuard nothing is recorded, so the request has no tape to link and carries no
  // placeholder. Waiting still gives the exchanged rows; dropping one unwaited (after a
  // waited one, so that every rank's collectives pair up) leaves nothing to run in backward.
  const int me = g.rank();
  const int64_t m = 2;
  Variable x(rank_input({m * g.size(), 2}, me), true, "x");
  NoGradGuard no_grad;
  AsyncRequest<Variable> req = all_to_all_single_async(x, g);
  const Variable y = req.wait();
  expect(!y.requires_grad(), g, "an unrecorded request's output requires grad");
  for (int k = 0; k < g.size(); ++k) {
    const Tensor sent = rank_input({m * g.size(), 2}, k).narrow(0, me * m, m);
    expect(equal(y.value().narrow(0, k * m, m), sent), g,
           "wrong rows from rank " + std::to_string(k));
  }
  {
    AsyncRequest<Variable> dropped = all_to_all_single_async(x, g);
  }
  barrier(g).wait();  // the dropped request's forward completed on every rank, unwaited
}

DG_CASE("all_to_all_single_async: a rank whose loss ignores the output still runs both "
        "backward halves", "[req_wait][all_to_all][forced]", 2, 3, 4) {
  // Rank 0 waits but its loss does not use y; the others weigh y by rank + 1.
  const int me = g.rank();
  const int64_t m = 1;
  Variable x(rank_input({m * g.size(), 3}, me), true, "x");
  Variable other(rank_input({2}, 40 + me), true, "other");
  AsyncRequest<Variable> req = all_to_all_single_async(x, g);
  Variable y = req.wait();
  Variable loss = me == 0 ? sum(other) : sum(mul(y, me + 1.0));
  loss.backward();
  expect(req.stage().gradient_waited, g, "the Req node did not run");
  for (int j = 0; j < g.size(); ++j) {
    const double want = j == 0 ? 0.0 : j + 1.0;
    expect(equal(x.grad().narrow(0, j * m, m), full({m, 3}, want, DType::Float64)), g,
           "block " + std::to_string(j) + " of dx is " + x.grad().to_string());
  }
}

namespace {

// An identity whose gradient may be declared local (as the replicated adjoints' are).
class LocalIdentity final : public ReqWaitOp {
 public:
  explicit LocalIdentity(bool communicates) : communicates_(communicates) {}
  std::string name() const override { return "local_identity"; }
  std::string describe() const override { return "local_identity"; }
  bool gradient_communicates() const override { return communicates_; }
  Work launch(const std::vector<Tensor>& in) override {
    y_ = in[0].clone();
    return Work();
  }
  std::vector<Tensor> finish() override { return {std::move(y_)}; }
  Work launch_gradient(const std::vector<Tensor>& g) override {
    dx_ = g[0].clone();
    return Work();
  }
  std::vector<Tensor> finish_gradient() override { return {std::move(dx_)}; }

 private:
  bool communicates_;
  Tensor y_, dx_;
};

}  // namespace

TEST_CASE("a Req/Wait op whose gradient does not communicate runs its nodes only where a "
          "gradient reaches them", "[req_wait]") {
  for (const bool communicates : {true, false}) {
    Variable x(ones({2}, DType::Float64), true, "x");
    Variable other(ones({2}, DType::Float64), true, "other");
    auto req = launch_async(std::make_shared<LocalIdentity>(communicates), {x});
    Variable y = req.wait()[0];
    sum(other).backward();  // ignores y, recorded after the Wait node
    INFO("gradient_communicates: " << communicates);
    // A collective op is forced to run (zeros); a local one is left out, as a plain op is.
    CHECK(req.stage().gradient_waited == communicates);
    CHECK(x.grad().defined() == communicates);
    // Where the gradient does reach them, both run.
    Variable z(ones({2}, DType::Float64), true, "z");
    auto used = launch_async(std::make_shared<LocalIdentity>(communicates), {z});
    sum(mul(used.wait()[0], 3.0)).backward();
    CHECK(used.stage().gradient_waited);
    CHECK(equal(z.grad(), full({2}, 3.0, DType::Float64)));
  }
}

DG_CASE("all_to_all_single_async: a backward before the wait runs the request (zero gradient) "
        "and the late wait is refused", "[req_wait][all_to_all]", 1, 2, 3) {
  Variable x(rank_input({g.size(), 2}, g.rank()), true, "x");
  AsyncRequest<Variable> req = all_to_all_single_async(x, g);
  sum(mul(x, 5.0)).backward();  // recorded after the Req node: forces it on every rank
  expect(equal(x.grad(), full(x.shape(), 5.0, DType::Float64)), g, "dx is " + x.grad().to_string());
  expect(req.stage().gradient_waited, g, "the Req node did not run");
  expect(wait_refused(req, "can no longer be waited for"), g, "a wait after the backward was not refused");
}

TEST_CASE("all_to_all_single_async rejects bad arguments before any data moves",
          "[req_wait][all_to_all]") {
  std::atomic<int> rejected{0};
  run_ranks(2, [&](Group& g) {
    auto refuse = [&](auto&& call, const char* needle) {
      try {
        call();
      } catch (const InvalidArgument& e) {
        const std::string what = e.what();
        if (what.find("all_to_all_single") != std::string::npos &&
            what.find("rank " + std::to_string(g.rank())) != std::string::npos &&
            what.find(needle) != std::string::npos)
          ++rejected;
      }
    };
    Variable v(ones({3, 2}, DType::Float64), true);
    refuse([&] { all_to_all_single_async(v, g); }, "multiple of the group size");  // 3 rows
    refuse([&] { all_to_all_single_async(Variable(ones({4}, DType::Int32)), g); }, "int32");
    refuse([&] { all_to_all_single_async(Variable(ones({}, DType::Float64)), g); },
           "at least one dimension");
    refuse([&] { all_to_all_single_async(v, {1, 2}, {3}, g); }, "one entry per rank");
    refuse([&] { all_to_all_single_async(v, {1, 2}, {4, -1}, g); }, "must be >= 0");
    refuse([&] { all_to_all_single_async(v, {1, 2}, {1, 1}, g); }, "add up to 3");
    // Nothing was recorded or moved: the group still works.
    Variable ok(ones({2, 2}, DType::Float64), true);
    Variable y = all_to_all_single_async(ok, g).wait();
    sum(y).backward();
  });
  CHECK(rejected.load() == 2 * 6);
}

TEST_CASE("all_to_all_single_async: a peer that never launches fails the wait at the deadline",
          "[req_wait][all_to_all]") {
  ftest::ScopedDefaultTimeout shorter(std::chrono::milliseconds(300));
  std::atomic<int> timed_out{0};
  std::latch waiter_done(1);
  run_ranks(2, [&](Group& g) {
    if (g.rank() == 1) {
      // Never launches, but stays alive: a rank that returned would be reported at once as a
      // PeerFailure (its end is known), not at the deadline.
      waiter_done.wait();
      return;
    }
    Variable x(ones({2, 2}, DType::Float64), true, "x");
    AsyncRequest<Variable> req = all_to_all_single_async(x, g);
    try {
      req.wait();
    } catch (const TimeoutError& e) {
      if (std::string(e.what()).find("all_to_all_single") != std::string::npos) ++timed_out;
    }
    waiter_done.count_down();
  });
  CHECK(timed_out.load() == 1);
}
