#include <ferry/autograd/optimizer.h>

#include <ferry/runtime/error.h>

#include <cmath>

namespace ferry {

namespace {

// Calls f.template operator()<T>() for float32 / float64 parameters.
template <class F>
void visit_float(const Variable& p, const char* op, F&& f) {
  switch (p.dtype()) {
    case DType::Float32: f.template operator()<float>(); return;
    case DType::Float64: f.template operator()<double>(); return;
    default:
      FERRY_THROW(InvalidArgument, op, ": parameter ", p.describe(), " is ",
                  dtype_name(p.dtype()), "; optimizers update float32 and float64 parameters");
  }
}

}  // namespace

Optimizer::Optimizer(std::vector<Variable> parameters, const char* name)
    : parameters_(std::move(parameters)) {
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const Variable& p = parameters_[i];
    FERRY_CHECK(p.defined() && p.is_leaf() && p.requires_grad(), InvalidArgument, name,
                ": parameter ", i, " (", p.describe(), ") must be a leaf that requires grad");
    visit_float(p, name, []<class T>() {});
  }
}

void Optimizer::zero_grad() {
  for (Variable& p : parameters_) p.zero_grad();
}

Sgd::Sgd(std::vector<Variable> parameters, SgdOptions options)
    : Optimizer(std::move(parameters), "Sgd"), options_(options),
      momentum_(parameters_.size()) {
  FERRY_CHECK(options.lr >= 0 && options.momentum >= 0 && options.weight_decay >= 0,
              InvalidArgument, "Sgd: lr, momentum and weight_decay must be >= 0, given ",
              options.lr, ", ", options.momentum, ", ", options.weight_decay);
  FERRY_CHECK(!options.nesterov || (options.momentum > 0 && options.dampening == 0),
              InvalidArgument, "Sgd: nesterov needs momentum > 0 and dampening 0, given ",
              options.momentum, " and ", options.dampening);
}

void Sgd::step() {
  for (size_t i = 0; i < parameters_.size(); ++i) {
    Variable& p = parameters_[i];
    if (!p.grad().defined()) continue;
    Tensor value = p.value();
    visit_float(p, "Sgd", [&]<class T>() {
      auto w = value.vec<T>();
      ColVector<T> g = p.grad().vec<T>();
      if (options_.weight_decay != 0) g += T(options_.weight_decay) * w;
      if (options_.momentum != 0) {
        if (!momentum_[i].defined()) {
          momentum_[i] = p.grad().clone();
          momentum_[i].vec<T>() = g;
        } else {
          auto b = momentum_[i].vec<T>();
          b = T(options_.momentum) * b + T(1 - options_.dampening) * g;
        }
        auto b = momentum_[i].vec<T>();
        if (options_.nesterov) {
          g += T(options_.momentum) * b;
        } else {
          g = b;
        }
      }
      w -= T(options_.lr) * g;
    });
    value.bump_version();
  }
}

Adagrad::Adagrad(std::vector<Variable> parameters, AdagradOptions options)
    : Optimizer(std::move(parameters), "Adagrad"), options_(options),
      sum_(parameters_.size()), steps_(parameters_.size(), 0) {
  FERRY_CHECK(options.lr >= 0 && options.lr_decay >= 0 && options.weight_decay >= 0 &&
                  options.initial_accumulator_value >= 0 && options.eps >= 0,
              InvalidArgument, "Adagrad: lr, lr_decay, weight_decay, "
              "initial_accumulator_value and eps must be >= 0");
  for (size_t i = 0; i < parameters_.size(); ++i) {
    sum_[i] = full(parameters_[i].shape(), options.initial_accumulator_value,
                   parameters_[i].dtype());
  }
}

void Adagrad::step() {
  for (size_t i = 0; i < parameters_.size(); ++i) {
    Variable& p = parameters_[i];
    if (!p.grad().defined()) continue;
    const int64_t t = ++steps_[i];
    const double clr = options_.lr / (1 + static_cast<double>(t - 1) * options_.lr_decay);
    Tensor value = p.value();
    visit_float(p, "Adagrad", [&]<class T>() {
      auto w = value.vec<T>();
      ColVector<T> g = p.grad().vec<T>();
      if (options_.weight_decay != 0) g += T(options_.weight_decay) * w;
      auto s = sum_[i].vec<T>();
      s.array() += g.array().square();
      w.array() -= T(clr) * g.array() / (s.array().sqrt() + T(options_.eps));
    });
    value.bump_version();
  }
}

}  // namespace ferry
