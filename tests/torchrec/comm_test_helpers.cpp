#include "comm_test_helpers.h"

#include <ferry/collectives/collectives.h>
#include <ferry/collectives/torchrec/torchrec.h>
#include "tests/differentiable/spmd_gradcheck.h"

namespace trtest {

Tensor mat(const std::vector<double>& values, int64_t rows, int64_t cols) {
  return ferry::from_vector<double>(values, {rows, cols});
}

ForwardBackward forward_backward(
    const std::function<std::vector<Variable>(const std::vector<Variable>&)>& op,
    const std::vector<Tensor>& inputs, const std::vector<Tensor>& grads) {
  std::vector<Variable> leaves;
  for (const Tensor& t : inputs) leaves.emplace_back(t.clone(), true);
  std::vector<Variable> outputs = op(leaves);
  ForwardBackward r;
  for (const Variable& y : outputs) r.outputs.push_back(y.value().clone());
  ferry::backward(outputs, grads);
  for (const Variable& x : leaves) r.input_grads.push_back(x.grad());
  return r;
}

ForwardBackward forward_backward(const std::function<Variable(const Variable&)>& op,
                                 const Tensor& input, const Tensor& grad) {
  return forward_backward(
      [&](const std::vector<Variable>& in) { return std::vector<Variable>{op(in[0])}; }, {input},
      {grad});
}

void with_gradient_division(const Group& g, bool on, const std::function<void()>& body) {
  ferry::barrier(g).wait();
  ferry::torchrec::set_gradient_division(on);
  try {
    body();
  } catch (...) {
    ferry::torchrec::set_gradient_division(true);
    throw;
  }
  ferry::barrier(g).wait();
  ferry::torchrec::set_gradient_division(true);
}

void expect_equal(const Tensor& a, const Tensor& b, const Group& g, const std::string& what) {
  const bool ok = a.defined() && b.defined() && a.dtype() == b.dtype() && ferry::equal(a, b);
  dgtest::expect(ok, g,
                 what + ": got " + (a.defined() ? a.to_string() : std::string("undefined")) +
                     ", expected " + (b.defined() ? b.to_string() : std::string("undefined")));
}

void expect_close(const Tensor& a, const Tensor& b, const Group& g, const std::string& what,
                  double tol) {
  const bool ok = a.defined() && b.defined() && a.shape() == b.shape() &&
                  ferry::allclose(a, b, 0.0, tol);
  dgtest::expect(ok, g,
                 what + ": got " + (a.defined() ? a.to_string() : std::string("undefined")) +
                     ", expected " + (b.defined() ? b.to_string() : std::string("undefined")));
}

void expect_invalid(const std::function<void()>& f, const std::vector<std::string>& parts,
                    const Group& g, const std::string& what) {
  try {
    f();
  } catch (const ferry::InvalidArgument& e) {
    const std::string message = e.what();
    for (const std::string& p : parts)
      dgtest::expect(message.find(p) != std::string::npos, g,
                     what + ": the message lacks '" + p + "': " + message);
    return;
  }
  dgtest::expect(false, g, what + ": no InvalidArgument");
}

// ---- the distributed gradcheck of one op (moved from test_comm_ops_gradcheck.cpp) ----

using namespace ferry;
using namespace ferry::torchrec;


Tensor rank_input(const ferry::Shape& shape, const Group& g, uint64_t salt) {
  return uniform(shape, -1.0, 1.0, 900 + 17 * salt + g.rank(), DType::Float64);
}

static int64_t global_elements(const Group& g, const std::vector<Tensor>& inputs) {
  int64_t n = 0;
  for (const Tensor& t : inputs) n += t.numel();
  Tensor total = from_vector<int64_t>({n});
  all_reduce(total, g).wait();
  return total.to_vector<int64_t>()[0];
}

// Outputs and input gradients of `fn` with upstream gradients drawn from a fixed seed.
static ForwardBackward run_once(const Group& g, const Fn& fn, const std::vector<Tensor>& inputs) {
  std::vector<Variable> leaves;
  for (const Tensor& t : inputs) leaves.emplace_back(t.clone(), true);
  std::vector<Variable> outputs = fn(leaves);
  std::vector<Tensor> seeds;
  for (size_t i = 0; i < outputs.size(); ++i)
    seeds.push_back(rank_input(outputs[i].shape(), g, 100 + i));
  ForwardBackward r;
  for (const Variable& y : outputs) r.outputs.push_back(y.value().clone());
  ferry::backward(outputs, seeds);
  for (const Variable& x : leaves) r.input_grads.push_back(x.grad());
  return r;
}

// The gradcheck with division on (mean objective) and off (sum objective), and the async and
// sync paths agreeing bit for bit under both.
// `async_divides` is false for alltoallv, whose asynchronous backward ignores the switch (its
// sync path divides): there the async gradient is the P adjoint either way and the sync one
// is it divided by W when division is on.
void check_op(const Group& g, const std::string& what, const Fn& fn,
              const std::vector<Tensor>& inputs, bool async_divides) {
  const int64_t elements = global_elements(g, inputs);
  for (bool division : {true, false}) {
    with_gradient_division(g, division, [&] {
      // With division on the backward is the P adjoint / W: each rank seeds its own loss's
      // gradient and the op divides, the gradient of the mean objective. The gradcheck's Mean
      // objective seeds the divided weights too, so instead undo the division with
      // CommOpGradientScaling (x W, torchrec's companion) and check the P adjoint against
      // the sum objective: a missing or doubled division is off by a factor W.
      const Fn checked = [&](const std::vector<Variable>& in) {
        std::vector<Variable> out = fn(in);
        if (division && async_divides)
          for (Variable& y : out) y = comm_op_gradient_scaling(y, int64_t{g.size()});
        return out;
      };
      dgtest::expect_passed(distributed_gradcheck(checked, inputs, g), elements, g);
      const auto async_run = run_once(g, fn, inputs);
      ForwardBackward sync_run;
      {
        UseSyncCollectivesScope sync;
        sync_run = run_once(g, fn, inputs);
      }
      for (size_t i = 0; i < async_run.outputs.size(); ++i)
        expect_equal(sync_run.outputs[i], async_run.outputs[i], g, what + ": sync output");
      for (size_t i = 0; i < async_run.input_grads.size(); ++i) {
        Tensor expected = async_run.input_grads[i].clone();
        if (division && !async_divides) expected.vec<double>() /= static_cast<double>(g.size());
        expect_equal(sync_run.input_grads[i], expected, g,
                     what + (division ? ": sync gradient (division on)" : ": sync gradient"));
      }
    });
  }
}

Fn one(const std::function<Awaitable<Variable>(const Variable&)>& op) {
  return [op](const std::vector<Variable>& in) { return std::vector<Variable>{op(in[0]).wait()}; };
}


}  // namespace trtest
