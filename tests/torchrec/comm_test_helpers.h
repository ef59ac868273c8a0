// Helpers of the torchrec comm-op SPMD cases (test_comm_ops_*.cpp): running one op forward and
// backward with a given upstream gradient, flipping the process-wide switches safely while
// ranks run as threads, and reading values.
#pragma once

#include <ferry/autograd/variable.h>
#include <ferry/collectives/group.h>
#include <ferry/runtime/awaitable.h>
#include <ferry/runtime/tensor.h>

#include <functional>
#include <string>
#include <vector>

namespace trtest {

using ferry::Group;
using ferry::Tensor;
using ferry::Variable;

// float64 [rows, cols] from row-major values.
Tensor mat(const std::vector<double>& values, int64_t rows, int64_t cols);

// The outputs of an op launched on `inputs` (leaves that require grad), and the inputs'
// gradients after one backward seeded with `grads` (one per output).
struct ForwardBackward {
  std::vector<Tensor> outputs;
  std::vector<Tensor> input_grads;
};
ForwardBackward forward_backward(
    const std::function<std::vector<Variable>(const std::vector<Variable>&)>& op,
    const std::vector<Tensor>& inputs, const std::vector<Tensor>& grads);
// One input, one output.
ForwardBackward forward_backward(const std::function<Variable(const Variable&)>& op,
                                 const Tensor& input, const Tensor& grad);

// Runs `body` with gradient division set to `on` on every rank of `g`, then restores the
// default (on). The switch is process-wide and ranks of the local transport are threads, so
// every flip sits behind a barrier: no rank is still in a backward that reads it.
void with_gradient_division(const Group& g, bool on, const std::function<void()>& body);

// Throws spmd::Failed naming `what` unless `a` and `b` are equal (same dtype, shape, values).
void expect_equal(const Tensor& a, const Tensor& b, const Group& g, const std::string& what);
// The same within `tol` (absolute), after converting to float64.
void expect_close(const Tensor& a, const Tensor& b, const Group& g, const std::string& what,
                  double tol);

// Runs `f`, expecting a ferry::InvalidArgument whose message holds every one of `parts`;
// throws spmd::Failed otherwise.
void expect_invalid(const std::function<void()>& f, const std::vector<std::string>& parts,
                    const Group& g, const std::string& what);

// The distributed gradcheck (float64) of an op, as the comm ops' gradcheck cases run it: with
// gradient division on (undone by comm_op_gradient_scaling, checked against the sum objective)
// and off, plus the sync path (UseSyncCollectivesScope) agreeing with the asynchronous one bit
// for bit. async_divides = false for alltoallv (its asynchronous backward never divides).
using Fn = std::function<std::vector<Variable>(const std::vector<Variable>&)>;
void check_op(const Group& g, const std::string& what, const Fn& fn,
              const std::vector<Tensor>& inputs, bool async_divides = true);
// One input, one output, from an op returning an awaitable.
Fn one(const std::function<ferry::Awaitable<Variable>(const Variable&)>& op);
// Uniform [-1, 1) float64 values, different on every rank (and salt).
Tensor rank_input(const ferry::Shape& shape, const Group& g, uint64_t salt = 0);

}  // namespace trtest
