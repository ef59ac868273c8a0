#include <ferry/collectives/differentiable/distributed_gradcheck.h>

#include <ferry/autograd/grad_mode.h>
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/engine/validator.h>
#include <ferry/runtime/error.h>

#include <cmath>

namespace ferry {

namespace {

// Gathers one int64 per rank.
std::vector<int64_t> gather_counts(int64_t mine, const Group& group) {
  Tensor out = empty({group.size()}, DType::Int64);
  all_gather(from_vector<int64_t>({mine}), out, group).wait();
  return out.to_vector<int64_t>();
}

double sum_over_ranks(double mine, const Group& group) {
  Tensor t = full({}, mine, DType::Float64);
  all_reduce(t, group).wait();
  return t.item();
}

std::vector<Variable> make_leaves(const std::vector<Tensor>& inputs, bool requires_grad,
                                  int rank) {
  std::vector<Variable> leaves;
  leaves.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    leaves.emplace_back(inputs[i].clone(), requires_grad,
                        detail::str("input ", i, " of rank ", rank));
  }
  return leaves;
}

// What one rank found; gathered as doubles to pick the worst over all ranks.
struct Worst {
  double ratio = -1.0, error = 0.0, input = 0.0, element = -1.0, analytic = 0.0, numeric = 0.0,
         checked = 0.0;
  static constexpr int kFields = 7;
};

// Every rank passes float64 inputs, as many as its peers; returns numels[i][r], the elements
// of input i on rank r.
std::vector<std::vector<int64_t>> checked_input_sizes(const std::vector<Tensor>& inputs,
                                                      const Group& group) {
  const int world = group.size();
  const int me = group.rank();
  for (size_t i = 0; i < inputs.size(); ++i) {
    FERRY_CHECK(inputs[i].defined() && inputs[i].dtype() == DType::Float64, InvalidArgument,
                "distributed_gradcheck on rank ", me, ": input ", i,
                " must be a float64 tensor");
  }
  const auto input_counts = gather_counts(static_cast<int64_t>(inputs.size()), group);
  for (int r = 0; r < world; ++r) {
    FERRY_CHECK(input_counts[r] == static_cast<int64_t>(inputs.size()), InvalidArgument,
                "distributed_gradcheck on rank ", me, ": every rank must pass the same number "
                "of inputs; rank ", r, " passed ", input_counts[r], ", this rank ",
                inputs.size());
  }
  std::vector<std::vector<int64_t>> numels;
  for (const Tensor& t : inputs) numels.push_back(gather_counts(t.numel(), group));
  return numels;
}

// The tape's side: one forward and one backward on every rank, each output that requires grad
// weighted by a fixed random tensor (the objective is the sum of those dot products).
struct Analytic {
  std::vector<Variable> leaves;   // whose grad() the probes compare with
  std::vector<bool> counted;      // outputs that require grad
  std::vector<Tensor> weights;    // their weights (float64)
};

Analytic run_backward(const DifferentiableFn& fn, const std::vector<Tensor>& inputs,
                      const Group& group, const DistributedGradcheckOptions& options,
                      double coefficient) {
  const int world = group.size();
  const int me = group.rank();
  const bool replicated = options.objective == GradcheckObjective::Replicated;
  Analytic a;
  a.leaves = make_leaves(inputs, true, me);
  std::vector<Variable> outputs = fn(a.leaves);
  a.counted.resize(outputs.size());
  a.weights.resize(outputs.size());
  std::vector<Variable> roots;
  std::vector<Tensor> seeds;
  for (size_t k = 0; k < outputs.size(); ++k) {
    a.counted[k] = outputs[k].defined() && outputs[k].requires_grad();
    if (!a.counted[k]) continue;
    const uint64_t seed = options.tolerances.seed + k + (replicated ? 0 : 1000003ull * (me + 1));
    a.weights[k] = normal(outputs[k].shape(), 0.0, 1.0, seed, DType::Float64);
    roots.push_back(outputs[k]);
    Tensor s = a.weights[k].clone();
    if (!replicated) s.vec<double>() *= coefficient;
    seeds.push_back(s.to(outputs[k].dtype()));
  }
  const auto root_counts = gather_counts(static_cast<int64_t>(roots.size()), group);
  for (int r = 0; r < world; ++r) {
    FERRY_CHECK(root_counts[r] > 0, InvalidArgument, "distributed_gradcheck on rank ", me,
                ": rank ", r, "'s function returned no output that requires grad, so it "
                "cannot run the backward its peers run");
  }
  backward(roots, seeds);
  return a;
}

// The worst element over all ranks (the same result on every rank).
DistributedGradcheckResult worst_over_ranks(const Worst& worst, const Group& group,
                                            const GradcheckOptions& tol) {
  const int world = group.size();
  Tensor mine = from_vector<double>({worst.ratio, worst.error, worst.input, worst.element,
                                     worst.analytic, worst.numeric, worst.checked});
  Tensor all = empty({world * Worst::kFields}, DType::Float64);
  all_gather(mine, all, group).wait();
  const auto v = all.to_vector<double>();
  DistributedGradcheckResult result;
  double best_ratio = -1.0;
  for (int r = 0; r < world; ++r) {
    const double* f = &v[r * Worst::kFields];
    result.elements_checked += static_cast<int64_t>(f[6]);
    if (f[3] >= 0 && f[0] > best_ratio) {
      best_ratio = f[0];
      result.worst_rank = r;
      result.worst_error = f[1];
      result.worst_input = static_cast<size_t>(f[2]);
      result.worst_element = static_cast<int64_t>(f[3]);
      result.analytic = f[4];
      result.numeric = f[5];
    }
  }
  result.ok = best_ratio <= 1.0;
  result.message = detail::gradcheck_verdict(result, tol, detail::str(" over ", world, " ranks"),
                                             detail::str("rank ", result.worst_rank, " "));
  return result;
}

}  // namespace

DistributedGradcheckResult distributed_gradcheck(const DifferentiableFn& fn,
                                                 const std::vector<Tensor>& inputs,
                                                 const Group& group,
                                                 const DistributedGradcheckOptions& options) {
  detail::check_group(group, "distributed_gradcheck");
  const int world = group.size();
  const int me = group.rank();
  const std::vector<std::vector<int64_t>> numels = checked_input_sizes(inputs, group);
  const double coefficient = options.objective == GradcheckObjective::Sum ? 1.0 : 1.0 / world;
  const GradcheckOptions& tol = options.tolerances;
  const Analytic analytic = run_backward(fn, inputs, group, options, coefficient);

  // The numeric side: the global objective at shifted inputs (every rank evaluates it, since
  // its value is a sum over the ranks).
  auto objective = [&](const std::vector<Tensor>& shifted) {
    std::vector<Variable> ys = fn(make_leaves(shifted, false, me));
    FERRY_CHECK(ys.size() == analytic.counted.size(), InvalidArgument,
                "distributed_gradcheck on rank ", me, ": the function returned ", ys.size(),
                " outputs, ", analytic.counted.size(), " the first time");
    double local = 0.0;
    for (size_t k = 0; k < ys.size(); ++k) {
      if (!analytic.counted[k]) continue;
      FERRY_CHECK(ys[k].shape() == analytic.weights[k].shape(), InvalidArgument,
                  "distributed_gradcheck on rank ", me, ": output ", k, " changed shape");
      Tensor y = ys[k].value().dtype() == DType::Float64 ? ys[k].value()
                                                         : ys[k].value().to(DType::Float64);
      local += y.vec<double>().dot(analytic.weights[k].vec<double>());
    }
    return sum_over_ranks(coefficient * local, group);
  };

  NoGradGuard no_grad;
  Worst worst;
  // Element e of input i: a central difference, compared with the tape's gradient where it is
  // this rank's element (every rank evaluates the objective either way).
  auto probe = [&](size_t i, int64_t e, bool perturb_here, bool compare_here) {
    std::vector<Tensor> shifted(inputs.begin(), inputs.end());
    double x = 0.0;
    if (perturb_here) {
      shifted[i] = inputs[i].clone();
      x = inputs[i].get_flat(e);
      shifted[i].set_flat(e, x + tol.eps);
    }
    const double plus = objective(shifted);
    if (perturb_here) shifted[i].set_flat(e, x - tol.eps);
    const double minus = objective(shifted);
    if (!compare_here) return;
    const double numeric = (plus - minus) / (2.0 * tol.eps);
    const Tensor& grad = analytic.leaves[i].grad();
    const double from_tape = grad.defined() ? grad.get_flat(e) : 0.0;
    const double error = std::abs(from_tape - numeric);
    const double ratio = error / (tol.atol + tol.rtol * std::abs(numeric));
    worst.checked += 1;
    if (ratio > worst.ratio) {
      worst = Worst{ratio, error, double(i), double(e), from_tape, numeric, worst.checked};
    }
  };
  if (options.replicated_inputs) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      for (int r = 0; r < world; ++r) {
        FERRY_CHECK(numels[i][r] == inputs[i].numel(), InvalidArgument,
                    "distributed_gradcheck on rank ", me, ": replicated input ", i,
                    " has ", numels[i][r], " elements on rank ", r, " but ", inputs[i].numel(),
                    " here");
      }
      for (int64_t e = 0; e < inputs[i].numel(); ++e) probe(i, e, true, true);
    }
  } else {
    for (int owner = 0; owner < world; ++owner) {
      for (size_t i = 0; i < inputs.size(); ++i) {
        for (int64_t e = 0; e < numels[i][owner]; ++e) probe(i, e, me == owner, me == owner);
      }
    }
  }
  return worst_over_ranks(worst, group, tol);
}

}  // namespace ferry
