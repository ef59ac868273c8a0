#include <ferry/collectives/differentiable/distributed_gradcheck.h>

#include <ferry/autograd/grad_mode.h>
#include <ferry/collectives/collectives.h>
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

}  // namespace

DistributedGradcheckResult distributed_gradcheck(const DifferentiableFn& fn,
                                                 const std::vector<Tensor>& inputs,
                                                 const Group& group,
                                                 const DistributedGradcheckOptions& options) {
  FERRY_CHECK(group.valid(), InvalidArgument, "distributed_gradcheck: the group is null");
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
  // numels[i][r]: elements of input i on rank r.
  std::vector<std::vector<int64_t>> numels;
  for (const Tensor& t : inputs) numels.push_back(gather_counts(t.numel(), group));

  const bool replicated = options.objective == GradcheckObjective::Replicated;
  const double coefficient = options.objective == GradcheckObjective::Sum ? 1.0 : 1.0 / world;
  const GradcheckOptions& tol = options.tolerances;

  // Analytic: one backward on every rank.
  std::vector<Variable> leaves = make_leaves(inputs, true, me);
  std::vector<Variable> outputs = fn(leaves);
  std::vector<bool> counted(outputs.size());
  std::vector<Tensor> weights(outputs.size());
  std::vector<Variable> roots;
  std::vector<Tensor> seeds;
  for (size_t k = 0; k < outputs.size(); ++k) {
    counted[k] = outputs[k].defined() && outputs[k].requires_grad();
    if (!counted[k]) continue;
    const uint64_t seed = tol.seed + k + (replicated ? 0 : 1000003ull * (me + 1));
    weights[k] = normal(outputs[k].shape(), 0.0, 1.0, seed, DType::Float64);
    roots.push_back(outputs[k]);
    Tensor s = weights[k].clone();
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

  auto objective = [&](const std::vector<Tensor>& shifted) {
    std::vector<Variable> ys = fn(make_leaves(shifted, false, me));
    FERRY_CHECK(ys.size() == outputs.size(), InvalidArgument, "distributed_gradcheck on rank ",
                me, ": the function returned ", ys.size(), " outputs, ", outputs.size(),
                " the first time");
    double local = 0.0;
    for (size_t k = 0; k < ys.size(); ++k) {
      if (!counted[k]) continue;
      FERRY_CHECK(ys[k].shape() == weights[k].shape(), InvalidArgument,
                  "distributed_gradcheck on rank ", me, ": output ", k, " changed shape");
      Tensor y = ys[k].value().dtype() == DType::Float64 ? ys[k].value()
                                                         : ys[k].value().to(DType::Float64);
      local += y.vec<double>().dot(weights[k].vec<double>());
    }
    return sum_over_ranks(coefficient * local, group);
  };

  NoGradGuard no_grad;
  Worst worst;
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
    const Tensor& grad = leaves[i].grad();
    const double analytic = grad.defined() ? grad.get_flat(e) : 0.0;
    const double error = std::abs(analytic - numeric);
    const double ratio = error / (tol.atol + tol.rtol * std::abs(numeric));
    worst.checked += 1;
    if (ratio > worst.ratio) {
      worst = Worst{ratio, error, double(i), double(e), analytic, numeric, worst.checked};
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

  // The worst over all ranks, the same on every rank.
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

}  // namespace ferry
