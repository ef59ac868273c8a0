#include <ferry/autograd/gradcheck.h>

#include <ferry/autograd/grad_mode.h>
#include <ferry/runtime/error.h>

#include <cmath>
#include <sstream>

namespace ferry {

namespace {

// Which outputs count in the objective: the differentiable floating ones.
std::vector<bool> counted_outputs(const std::vector<Variable>& outputs) {
  std::vector<bool> counted(outputs.size());
  for (size_t k = 0; k < outputs.size(); ++k) {
    counted[k] = outputs[k].defined() && outputs[k].requires_grad();
  }
  return counted;
}

double objective(const std::vector<Variable>& outputs, const std::vector<bool>& counted,
                 const std::vector<Tensor>& weights) {
  FERRY_CHECK(outputs.size() == counted.size(), InvalidArgument, "gradcheck: the function "
              "returned ", outputs.size(), " outputs, ", counted.size(), " the first time");
  double sum = 0.0;
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (!counted[k]) continue;
    const Tensor& y = outputs[k].value();
    FERRY_CHECK(y.shape() == weights[k].shape(), InvalidArgument, "gradcheck: output ", k,
                " changed shape from ", shape_str(weights[k].shape()), " to ",
                shape_str(y.shape()), " between calls");
    Tensor y64 = y.dtype() == DType::Float64 ? y : y.to(DType::Float64);
    sum += y64.vec<double>().dot(weights[k].vec<double>());
  }
  return sum;
}

std::vector<Variable> leaves_from(const std::vector<Tensor>& inputs, bool requires_grad) {
  std::vector<Variable> leaves;
  leaves.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    leaves.emplace_back(inputs[i].clone(), requires_grad, detail::str("input ", i));
  }
  return leaves;
}

}  // namespace

namespace detail {

std::string gradcheck_verdict(const GradcheckResult& r, const GradcheckOptions& tol,
                              const std::string& scope, const std::string& where) {
  if (r.worst_element < 0) return "ok: no input elements to check";
  std::ostringstream msg;
  msg.precision(10);
  msg << (r.ok ? "ok: " : "FAILED: ") << r.elements_checked << " elements" << scope
      << ", worst at " << where << "input " << r.worst_input << " element " << r.worst_element
      << ": analytic " << r.analytic << ", numeric " << r.numeric << ", |difference| "
      << r.worst_error << (r.ok ? " within " : " exceeds ") << "atol " << tol.atol << " + rtol "
      << tol.rtol << " * |numeric|";
  return msg.str();
}

}  // namespace detail

GradcheckResult gradcheck(const DifferentiableFn& fn, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& options) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    FERRY_CHECK(inputs[i].defined() && inputs[i].dtype() == DType::Float64, InvalidArgument,
                "gradcheck: input ", i, " must be a float64 tensor, given ",
                inputs[i].defined() ? dtype_name(inputs[i].dtype()) : "an undefined tensor");
  }

  // Analytic: one backward with the weights as the outputs' gradients.
  std::vector<Variable> leaves = leaves_from(inputs, true);
  std::vector<Variable> outputs = fn(leaves);
  std::vector<bool> counted = counted_outputs(outputs);
  std::vector<Tensor> weights(outputs.size());
  std::vector<Variable> roots;
  std::vector<Tensor> root_grads;
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (!counted[k]) continue;
    weights[k] = normal(outputs[k].shape(), 0.0, 1.0, options.seed + k, DType::Float64);
    roots.push_back(outputs[k]);
    root_grads.push_back(weights[k].to(outputs[k].dtype()));
  }
  if (!roots.empty()) backward(roots, root_grads);

  GradcheckResult result;
  double worst_ratio = -1.0;
  NoGradGuard no_grad;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor analytic = leaves[i].grad();
    for (int64_t e = 0; e < inputs[i].numel(); ++e) {
      std::vector<Tensor> shifted(inputs.begin(), inputs.end());
      shifted[i] = inputs[i].clone();
      const double x = inputs[i].get_flat(e);
      shifted[i].set_flat(e, x + options.eps);
      const double plus = objective(fn(leaves_from(shifted, false)), counted, weights);
      shifted[i].set_flat(e, x - options.eps);
      const double minus = objective(fn(leaves_from(shifted, false)), counted, weights);
      const double numeric = (plus - minus) / (2.0 * options.eps);
      const double value = analytic.defined() ? analytic.get_flat(e) : 0.0;
      const double error = std::abs(value - numeric);
      const double ratio = error / (options.atol + options.rtol * std::abs(numeric));
      ++result.elements_checked;
      if (ratio > worst_ratio) {
        worst_ratio = ratio;
        result.worst_error = error;
        result.worst_input = i;
        result.worst_element = e;
        result.analytic = value;
        result.numeric = numeric;
      }
    }
  }
  result.ok = worst_ratio <= 1.0;
  result.message = detail::gradcheck_verdict(result, options);
  return result;
}

}  // namespace ferry
