// Helpers for the differentiable op tests: gradcheck that must cover every element.
#pragma once

#include <ferry/autograd/gradcheck.h>
#include <ferry/autograd/variable.h>
#include <ferry/runtime/tensor.h>

#include <catch2/catch.hpp>

#include <functional>
#include <vector>

namespace ferry::testing {

// gradcheck(fn, inputs) must pass and must have perturbed every input element (so a check
// over zero-size inputs is counted, and a non-empty one cannot pass vacuously).
inline void check_gradients(const DifferentiableFn& fn, const std::vector<Tensor>& inputs,
                            const GradcheckOptions& options = {}) {
  const GradcheckResult r = gradcheck(fn, inputs, options);
  INFO(r.message);
  CHECK(r.ok);
  int64_t total = 0;
  for (const Tensor& t : inputs) total += t.numel();
  CHECK(r.elements_checked == total);
}

// An op of one output as a gradcheck function.
inline DifferentiableFn single(std::function<Variable(const std::vector<Variable>&)> f) {
  return [f](const std::vector<Variable>& in) { return std::vector<Variable>{f(in)}; };
}

}  // namespace ferry::testing
