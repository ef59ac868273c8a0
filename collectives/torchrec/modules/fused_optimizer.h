// ferry::torchrec sparse (row) optimizers: what fbgemm's fused TBE kernels apply to the touched
// rows of a table in the lookup's backward (torchrec's "fused params"), usable fused (owned by an
// EmbeddingTable and run by backward) or by hand on a SparseRowGradient (the non-fused path).
//
// Per step the gradient g_r of each touched row r is the
// accumulated SparseRowGradient row; each touched row is updated once; untouched rows and their
// state are left alone. Exactly, per element (all arithmetic in the table's dtype T; the
// constants lr, eps, 1 - b1, 1 - b2, 1 - b1^t, 1 - b2^t, 1 - lr * wd are computed in double
// and rounded once to T):
//
//   Sgd                  w -= lr * g
//   ExactAdagrad         m += g * g;  w -= lr * g / (sqrt(m) + eps)              (m per element)
//   ExactRowwiseAdagrad  m_r += (sum_d h[d] * h[d]) / D;  mult = lr / (sqrt(m_r) + eps);
//                        w = c * w - mult * g                                   (m per row)
//                          None:      h = g,          c = 1 (w = w - mult * g)
//                          L2:        h = g + wd * w, c = 1 - mult * wd
//                          Decoupled: h = g,          c = 1 - lr * wd
//                        (the sum over d runs d = 0, 1, ... in T; D is the table's, or shard's,
//                        column count: column-wise shards keep their own row mean, so a
//                        column-sharded row-wise Adagrad is not the unsharded one)
//   Adam (lazy)          t = step count after this step (global: counts steps in which the
//                        row was untouched too); m = b1 * m + (1 - b1) * g;
//                        v = b2 * v + (1 - b2) * g * g;
//                        w -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
//
// A step is one call of step(): for a fused table, one backward of one lookup node (a table looked
// up by two nodes before one backward takes two steps, as with fbgemm). weight_decay is only
// supported by ExactRowwiseAdagrad (fbgemm's modes NONE / L2 / DECOUPLED); for the others a
// non-zero weight_decay is refused (ferry does not guess a weight-decay rule for them).
#pragma once

#include <ferry/collectives/torchrec/modules/sparse_row_gradient.h>
#include <ferry/runtime/tensor.h>

#include <cstdint>
#include <span>
#include <string>

namespace ferry::torchrec {

// fbgemm's EmbOptimType names: SGD, EXACT_ADAGRAD, EXACT_ROWWISE_ADAGRAD, ADAM.
enum class EmbOptimType { Sgd, ExactAdagrad, ExactRowwiseAdagrad, Adam };
// fbgemm's WeightDecayMode: NONE, L2, DECOUPLED.
enum class WeightDecayMode { None, L2, Decoupled };
const char* emb_optim_type_name(EmbOptimType t);  // "SGD", "EXACT_ADAGRAD", ...

// torchrec's fused params (the `fused_params` dict of a sharder / the optimizer kwargs of
// apply_optimizer_in_backward), as a struct.
struct FusedOptimizerConfig {
  EmbOptimType optimizer = EmbOptimType::Sgd;
  double learning_rate = 0.01;
  double eps = 1.0e-8;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double weight_decay = 0.0;
  WeightDecayMode weight_decay_mode = WeightDecayMode::None;
  double initial_accumulator_value = 0.0;  // Adagrad's m at creation (both variants)
};

// Validates: lr >= 0, eps > 0 (Adagrad / Adam), betas in [0, 1), weight decay as above.
// Throws InvalidArgument "FusedOptimizerConfig: ...".
void validate(const FusedOptimizerConfig& c);

// The optimizer of one table (or one shard): its state has the table's rows (and columns for
// per-element state), so a shard carries its own state.
class SparseOptimizer {
 public:
  SparseOptimizer(FusedOptimizerConfig config, int64_t rows, int64_t cols, DType dtype);

  // Updates the rows of `weight` ([rows, cols], the dtype given at construction) named by g
  // (local row ids) and bumps weight's version. Increments step_count() first (also when g has
  // no rows).
  void step(Tensor& weight, const SparseRowGradient& g);
  // The fused backward's form: `rows` DISTINCT local rows in any order, row k's accumulated
  // gradient at values[k * cols, (k + 1) * cols), in buffers the caller reuses across steps
  // (no SparseRowGradient is built). Each row's update depends only on that row, so the order
  // of the rows does not change the result. The values' type must be the dtype given at
  // construction. Same step count and checks as above.
  void step(Tensor& weight, std::span<const int64_t> rows, std::span<const float> values);
  void step(Tensor& weight, std::span<const int64_t> rows, std::span<const double> values);

  const FusedOptimizerConfig& config() const { return config_; }
  void set_learning_rate(double lr) { config_.learning_rate = lr; }
  int64_t step_count() const { return step_; }
  // Adagrad: the accumulator ([rows, cols] element-wise, [rows] row-wise); Adam: m. Undefined
  // for SGD.
  const Tensor& momentum1() const { return momentum1_; }
  const Tensor& momentum2() const { return momentum2_; }  // Adam's v; undefined otherwise
  // Replaces the state with a saved one (a checkpoint's): the step count and the momenta, which
  // must have the shapes above (undefined where the optimizer has none). Copied in, converted
  // to the optimizer's dtype. InvalidArgument naming `what` for a wrong shape or a negative step.
  void load_state(int64_t step, const Tensor& momentum1, const Tensor& momentum2,
                  const std::string& what);

 private:
  void check_weight(const Tensor& weight) const;
  template <class T>
  void step_rows(Tensor& weight, const int64_t* rows, int64_t n, const T* values);
  template <class T>  // the two span forms of step()
  void step_span(Tensor& weight, std::span<const int64_t> rows, std::span<const T> values);

  FusedOptimizerConfig config_;
  int64_t rows_, cols_;
  DType dtype_;
  int64_t step_ = 0;
  Tensor momentum1_, momentum2_;
};

}  // namespace ferry::torchrec
