// gradcheck: compares the tape's gradients with float64 central finite differences.
//
// The function may return several variables of any shape. gradcheck reduces them to one scalar
// objective, sum_k <W_k, y_k> with fixed pseudo-random weights W_k (seeded), so that backward
// receives a non-trivial gradient for every output element. Each element of each input is
// perturbed by +-eps and the objective recomputed with recording off; the difference quotient
// is compared with the analytic gradient: |analytic - numeric| <= atol + rtol * |numeric|.
#pragma once

#include <ferry/autograd/variable.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ferry {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-6;
  double rtol = 1e-4;
  uint64_t seed = 12345;  // for the output weights
};

struct GradcheckResult {
  bool ok = true;
  // The element with the largest violation (or, when all pass, the largest |analytic - numeric|).
  double worst_error = 0.0;
  size_t worst_input = 0;
  int64_t worst_element = -1;  // row-major index into that input; -1 if no input has elements
  double analytic = 0.0;
  double numeric = 0.0;
  int64_t elements_checked = 0;
  std::string message;  // one line: "ok ..." or which element failed and by how much
};

using DifferentiableFn = std::function<std::vector<Variable>(const std::vector<Variable>& inputs)>;

// `inputs` must be float64 (finite differences in float32 are too coarse to be a check); each
// becomes a leaf that requires grad. The function must be deterministic and may capture
// anything that is not differentiated (indices, targets, options).
GradcheckResult gradcheck(const DifferentiableFn& fn, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& options = {});

namespace detail {
// The one-line verdict of a check whose worst element is filled in (worst_element < 0: none):
// "FAILED: 12 elements<scope>, worst at <where>input 1 element 4: analytic ...". Shared with
// distributed_gradcheck, which adds the ranks.
std::string gradcheck_verdict(const GradcheckResult& r, const GradcheckOptions& tol,
                              const std::string& scope = "", const std::string& where = "");
}  // namespace detail

}  // namespace ferry
