// Helpers shared by the embedding-module tests: the example KJT and tables below and a finite-
// difference check of a table's gradient through a dense view of its SparseRowGradient.
#pragma once

#include <ferry/autograd/grad_mode.h>
#include <ferry/autograd/variable.h>
#include <ferry/collectives/torchrec/torchrec.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <vector>

namespace ferry::torchrec::testing {

// keys [f0, x, g, f1], B = 3 (x is served by no table):
//   f0: [1, 3] [] [2]     x: [7] [8] []     g: [0, 2, 2] [1] []     f1: [4] [0, 0] []
// weights 0.5 2 1.5 | 9 9 | 1 0.25 0.5 4 | -1 1 3
inline KeyedJaggedTensor example_kjt(bool weighted, DType wdtype = DType::Float64) {
  Tensor values = from_vector<int64_t>({1, 3, 2, 7, 8, 0, 2, 2, 1, 4, 0, 0});
  Tensor lengths = from_vector<int64_t>({2, 0, 1, 1, 1, 0, 3, 1, 0, 1, 2, 0});
  Tensor weights;
  if (weighted) {
    weights = from_vector<double>({0.5, 2, 1.5, 9, 9, 1, 0.25, 0.5, 4, -1, 1, 3}).to(wdtype);
  }
  return KeyedJaggedTensor::from_lengths_sync({"f0", "x", "g", "f1"}, values, lengths, weights);
}

// t0: 5 x 2, features f0 and f1, SUM, row r = [r, 10 + r];
// t1: 3 x 3, feature g, MEAN, row r = [r + 1, 2 (r + 1), 3 (r + 1)]. float64.
inline std::vector<EmbeddingBagConfig> example_tables() {
  return {{.name = "t0", .num_embeddings = 5, .embedding_dim = 2, .feature_names = {"f0", "f1"},
           .pooling = PoolingType::Sum, .data_type = DType::Float64},
          {.name = "t1", .num_embeddings = 3, .embedding_dim = 3, .feature_names = {"g"},
           .pooling = PoolingType::Mean, .data_type = DType::Float64}};
}

inline void set_example_weights(const EmbeddingBagCollection& ebc) {
  Tensor t0 = ebc.table("t0")->weight().value();
  for (int64_t r = 0; r < 5; ++r) {
    t0.set_flat(2 * r, static_cast<double>(r));
    t0.set_flat(2 * r + 1, 10.0 + static_cast<double>(r));
  }
  Tensor t1 = ebc.table("t1")->weight().value();
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t d = 0; d < 3; ++d) t1.set_flat(3 * r + d, static_cast<double>((d + 1) * (r + 1)));
}

inline double objective(const std::vector<Variable>& ys, const std::vector<Tensor>& us) {
  double s = 0;
  for (size_t k = 0; k < ys.size(); ++k)
    for (int64_t i = 0; i < us[k].numel(); ++i) s += ys[k].value().get_flat(i) * us[k].get_flat(i);
  return s;
}

// Random upstream gradients shaped like the outputs of fn.
inline std::vector<Tensor> upstream_like(const std::vector<Variable>& ys, uint64_t seed) {
  std::vector<Tensor> us;
  for (size_t k = 0; k < ys.size(); ++k)
    us.push_back(uniform(ys[k].shape(), -1, 1, seed + k, ys[k].dtype()));
  return us;
}

// Central differences of sum_k <U_k, fn()_k> w.r.t. every element of the table against the
// dense view of the table's sparse gradient (non-fused table, float64). Returns the number of
// elements that disagree beyond atol + rtol |numeric|.
inline int table_gradcheck(const std::function<std::vector<Variable>()>& fn, EmbeddingTable& table,
                           double eps = 1e-6, double atol = 1e-7, double rtol = 1e-6) {
  table.zero_sparse_grad();
  std::vector<Variable> ys = fn();
  std::vector<Tensor> us = upstream_like(ys, 99);
  backward(ys, us);
  Tensor analytic = table.sparse_grad().to_dense(table.shard().num_rows);
  NoGradGuard no_grad;
  Tensor w = table.weight().value();
  int bad = 0;
  for (int64_t e = 0; e < w.numel(); ++e) {
    const double orig = w.get_flat(e);
    w.set_flat(e, orig + eps);
    const double fp = objective(fn(), us);
    w.set_flat(e, orig - eps);
    const double fm = objective(fn(), us);
    w.set_flat(e, orig);
    const double numeric = (fp - fm) / (2 * eps);
    if (std::abs(numeric - analytic.get_flat(e)) > atol + rtol * std::abs(numeric)) {
      UNSCOPED_INFO("element " << e << ": analytic " << analytic.get_flat(e) << " numeric "
                               << numeric);
      ++bad;
    }
  }
  return bad;
}

}  // namespace ferry::torchrec::testing
