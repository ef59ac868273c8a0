#include "comm_test_helpers.h"

#include "collectives/collectives.h"
#include "collectives/torchrec/torchrec.h"
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

}  // namespace trtest
