#include <ferry/collectives/torchrec/modules/fused_optimizer.h>

#include <ferry/collectives/torchrec/modules/row_kernels.h>

#include <ferry/runtime/error.h>

#include <Eigen/Core>

#include <cmath>

namespace ferry::torchrec {

const char* emb_optim_type_name(EmbOptimType t) {
  switch (t) {
    case EmbOptimType::Sgd: return "SGD";
    case EmbOptimType::ExactAdagrad: return "EXACT_ADAGRAD";
    case EmbOptimType::ExactRowwiseAdagrad: return "EXACT_ROWWISE_ADAGRAD";
    case EmbOptimType::Adam: return "ADAM";
  }
  return "?";
}

void validate(const FusedOptimizerConfig& c) {
  const char* name = emb_optim_type_name(c.optimizer);
  FERRY_CHECK(std::isfinite(c.learning_rate) && c.learning_rate >= 0, InvalidArgument,
              "FusedOptimizerConfig: ", name, ": learning_rate must be >= 0, got ",
              c.learning_rate);
  if (c.optimizer != EmbOptimType::Sgd) {
    FERRY_CHECK(c.eps > 0, InvalidArgument, "FusedOptimizerConfig: ", name,
                ": eps must be > 0, got ", c.eps);
  }
  if (c.optimizer == EmbOptimType::Adam) {
    FERRY_CHECK(c.beta1 >= 0 && c.beta1 < 1 && c.beta2 >= 0 && c.beta2 < 1, InvalidArgument,
                "FusedOptimizerConfig: ADAM: betas must be in [0, 1), got (", c.beta1, ", ",
                c.beta2, ")");
  }
  if (c.optimizer != EmbOptimType::ExactRowwiseAdagrad) {
    FERRY_CHECK(c.weight_decay == 0 && c.weight_decay_mode == WeightDecayMode::None,
                InvalidArgument, "FusedOptimizerConfig: ", name,
                ": weight decay is only supported by EXACT_ROWWISE_ADAGRAD (got weight_decay ",
                c.weight_decay, ")");
  } else {
    FERRY_CHECK(std::isfinite(c.weight_decay) && c.weight_decay >= 0, InvalidArgument,
                "FusedOptimizerConfig: weight_decay must be >= 0, got ", c.weight_decay);
  }
}

SparseOptimizer::SparseOptimizer(FusedOptimizerConfig config, int64_t rows, int64_t cols,
                                 DType dtype)
    : config_(config), rows_(rows), cols_(cols), dtype_(dtype) {
  validate(config_);
  FERRY_CHECK(dtype == DType::Float32 || dtype == DType::Float64, InvalidArgument,
              "SparseOptimizer: dtype must be float32 or float64, got ", dtype_name(dtype));
  switch (config_.optimizer) {
    case EmbOptimType::Sgd: break;
    case EmbOptimType::ExactAdagrad:
      momentum1_ = full({rows, cols}, config_.initial_accumulator_value, dtype);
      break;
    case EmbOptimType::ExactRowwiseAdagrad:
      momentum1_ = full({rows}, config_.initial_accumulator_value, dtype);
      break;
    case EmbOptimType::Adam:
      momentum1_ = zeros({rows, cols}, dtype);
      momentum2_ = zeros({rows, cols}, dtype);
      break;
  }
}

void SparseOptimizer::load_state(int64_t step, const Tensor& momentum1, const Tensor& momentum2,
                                 const std::string& what) {
  FERRY_CHECK(step >= 0, InvalidArgument, what, ": the step count must be >= 0, given ", step);
  const auto load = [&](Tensor& mine, const Tensor& saved, const char* name) {
    FERRY_CHECK(mine.defined() == saved.defined(), InvalidArgument, what, ": ",
                emb_optim_type_name(config_.optimizer), (mine.defined() ? " keeps " : " keeps no "),
                name, ", but the saved state ", (saved.defined() ? "has" : "has no"), " one");
    if (!mine.defined()) return;
    FERRY_CHECK(saved.shape() == mine.shape(), InvalidArgument, what, ": ", name, " must be ",
                shape_str(mine.shape()), ", given ", shape_str(saved.shape()));
    mine.copy_(saved.to(dtype_));
  };
  load(momentum1_, momentum1, "momentum1");
  load(momentum2_, momentum2, "momentum2");
  step_ = step;
}

namespace {

// The rows are scattered over the table: the update asks for a later row's lines while it works
// on the current one.
template <class T>
void prefetch_row_for_write(const T* row, int64_t D) {
  const char* p = reinterpret_cast<const char*>(row);
  for (size_t line = 0; line < static_cast<size_t>(D) * sizeof(T); line += 64)
    __builtin_prefetch(p + line, 1);
}

template <class T>
void update(const FusedOptimizerConfig& c, int64_t t, Tensor& weight, Tensor& m1, Tensor& m2,
            const int64_t* rows, int64_t n, const T* grad) {
  const int64_t D = weight.size(1);
  T* w = weight.data<T>();
  const T lr = static_cast<T>(c.learning_rate);
  const T eps = static_cast<T>(c.eps);
  if (c.optimizer == EmbOptimType::Sgd) {
    detail::with_row_length(D, [&]<int kCols>() {
      for (int64_t k = 0; k < n; ++k) {
        if (k + 8 < n) prefetch_row_for_write(w + rows[k + 8] * D, D);
        detail::row<T, kCols>(w + rows[k] * D, D) -= lr * detail::row<T, kCols>(grad + k * D, D);
      }
    });
    return;
  }
  for (int64_t k = 0; k < n; ++k) {
    // The rows are scattered over the table: ask for a later one's lines while this one runs.
    if (k + 8 < n) prefetch_row_for_write(w + rows[k + 8] * D, D);
    T* wr = w + rows[k] * D;
    const T* gr = grad + k * D;
    switch (c.optimizer) {
      case EmbOptimType::Sgd:  // stepped above, the row length dispatched once per table
        break;
      case EmbOptimType::ExactAdagrad: {
        T* mr = m1.data<T>() + rows[k] * D;
        for (int64_t d = 0; d < D; ++d) {
          mr[d] += gr[d] * gr[d];
          wr[d] -= lr * gr[d] / (std::sqrt(mr[d]) + eps);
        }
        break;
      }
      case EmbOptimType::ExactRowwiseAdagrad: {
        const T wd = static_cast<T>(c.weight_decay);
        const bool l2 = c.weight_decay_mode == WeightDecayMode::L2;
        T s = 0;
        for (int64_t d = 0; d < D; ++d) {
          const T h = l2 ? gr[d] + wd * wr[d] : gr[d];
          s += h * h;
        }
        T& m = m1.data<T>()[rows[k]];
        m += s / static_cast<T>(D);
        const T mult = lr / (std::sqrt(m) + eps);
        if (c.weight_decay_mode == WeightDecayMode::None) {
          for (int64_t d = 0; d < D; ++d) wr[d] = wr[d] - mult * gr[d];
        } else {
          const T coef = l2 ? T(1) - mult * wd
                            : static_cast<T>(1.0 - c.learning_rate * c.weight_decay);
          for (int64_t d = 0; d < D; ++d) wr[d] = coef * wr[d] - mult * gr[d];
        }
        break;
      }
      case EmbOptimType::Adam: {
        const T b1 = static_cast<T>(c.beta1), b2 = static_cast<T>(c.beta2);
        const T one_b1 = static_cast<T>(1.0 - c.beta1), one_b2 = static_cast<T>(1.0 - c.beta2);
        const T bc1 = static_cast<T>(1.0 - std::pow(c.beta1, static_cast<double>(t)));
        const T bc2 = static_cast<T>(1.0 - std::pow(c.beta2, static_cast<double>(t)));
        T* mr = m1.data<T>() + rows[k] * D;
        T* vr = m2.data<T>() + rows[k] * D;
        for (int64_t d = 0; d < D; ++d) {
          mr[d] = b1 * mr[d] + one_b1 * gr[d];
          vr[d] = b2 * vr[d] + one_b2 * gr[d] * gr[d];
          wr[d] -= lr * (mr[d] / bc1) / (std::sqrt(vr[d] / bc2) + eps);
        }
        break;
      }
    }
  }
}

}  // namespace

void SparseOptimizer::check_weight(const Tensor& weight) const {
  FERRY_CHECK(weight.defined() && weight.dim() == 2 && weight.size(0) == rows_ &&
                  weight.size(1) == cols_ && weight.dtype() == dtype_,
              InvalidArgument, "SparseOptimizer::step: the weight must be [", rows_, ", ", cols_,
              "] ", dtype_name(dtype_), ", got ",
              weight.defined() ? shape_str(weight.shape()) : "undefined");
}

template <class T>
void SparseOptimizer::step_rows(Tensor& weight, const int64_t* rows, int64_t n, const T* values) {
  update<T>(config_, step_, weight, momentum1_, momentum2_, rows, n, values);
  weight.bump_version();
  if (momentum1_.defined()) momentum1_.bump_version();
  if (momentum2_.defined()) momentum2_.bump_version();
}

void SparseOptimizer::step(Tensor& weight, const SparseRowGradient& g) {
  check_weight(weight);
  ++step_;
  if (g.empty()) return;
  FERRY_CHECK(g.cols() == cols_ && g.dtype() == dtype_, InvalidArgument,
              "SparseOptimizer::step: a gradient of [*, ", g.cols(), "] ", dtype_name(g.dtype()),
              " for a table of [", rows_, ", ", cols_, "] ", dtype_name(dtype_));
  const int64_t last = g.rows().data<int64_t>()[g.num_rows() - 1];
  FERRY_CHECK(last < rows_, InvalidArgument, "SparseOptimizer::step: gradient row ", last,
              " of a table of ", rows_, " rows");
  if (dtype_ == DType::Float32) {
    step_rows(weight, g.rows().data<int64_t>(), g.num_rows(), g.values().data<float>());
  } else {
    step_rows(weight, g.rows().data<int64_t>(), g.num_rows(), g.values().data<double>());
  }
}

namespace {

template <class T>
void check_rows(const char* type, DType dtype, int64_t rows, int64_t cols,
                std::span<const int64_t> r, std::span<const T> values) {
  FERRY_CHECK(dtype == (sizeof(T) == 4 ? DType::Float32 : DType::Float64) &&
                  values.size() == r.size() * static_cast<size_t>(cols),
              InvalidArgument, "SparseOptimizer::step: ", r.size(), " rows with ", values.size(),
              " ", type, " values for a table of [", rows, ", ", cols, "] ", dtype_name(dtype));
  for (int64_t row : r) {
    FERRY_CHECK(row >= 0 && row < rows, InvalidArgument, "SparseOptimizer::step: gradient row ",
                row, " of a table of ", rows, " rows");
  }
}

}  // namespace

template <class T>
void SparseOptimizer::step_span(Tensor& weight, std::span<const int64_t> rows,
                                std::span<const T> values) {
  check_weight(weight);
  check_rows(sizeof(T) == 4 ? "float32" : "float64", dtype_, rows_, cols_, rows, values);
  ++step_;
  if (!rows.empty())
    step_rows(weight, rows.data(), static_cast<int64_t>(rows.size()), values.data());
}

void SparseOptimizer::step(Tensor& weight, std::span<const int64_t> rows,
                           std::span<const float> values) {
  step_span(weight, rows, values);
}

void SparseOptimizer::step(Tensor& weight, std::span<const int64_t> rows,
                           std::span<const double> values) {
  step_span(weight, rows, values);
}

}  // namespace ferry::torchrec
