// Optimizers: SGD (momentum, dampening, Nesterov, weight decay) and Adagrad, with torch's update
// rules. They update the parameters' values in place (bumping their versions) and skip
// parameters whose grad() is undefined. float32 and float64 parameters.
#pragma once

#include <ferry/autograd/variable.h>

#include <cstdint>
#include <vector>

namespace ferry {

class Optimizer {
 public:
  // Every parameter must be a leaf that requires grad.
  explicit Optimizer(std::vector<Variable> parameters, const char* name);
  virtual ~Optimizer() = default;
  virtual void step() = 0;
  // Sets every parameter's grad back to undefined (torch's set_to_none).
  void zero_grad();
  const std::vector<Variable>& parameters() const { return parameters_; }

 protected:
  std::vector<Variable> parameters_;
};

struct SgdOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;  // needs momentum > 0 and dampening == 0
};

// g = grad + weight_decay * p; with momentum: b = g at the first step, else
// b = momentum * b + (1 - dampening) * g, and g = nesterov ? g + momentum * b : b;
// then p -= lr * g.
class Sgd : public Optimizer {
 public:
  Sgd(std::vector<Variable> parameters, SgdOptions options);
  void step() override;

 private:
  SgdOptions options_;
  std::vector<Tensor> momentum_;  // per parameter; undefined until its first step
};

struct AdagradOptions {
  double lr = 0.01;
  double lr_decay = 0.0;
  double weight_decay = 0.0;
  double initial_accumulator_value = 0.0;
  double eps = 1e-10;
};

// Per parameter, step t = 1, 2, ...: g = grad + weight_decay * p;
// s += g * g; p -= lr / (1 + (t - 1) * lr_decay) * g / (sqrt(s) + eps).
class Adagrad : public Optimizer {
 public:
  Adagrad(std::vector<Variable> parameters, AdagradOptions options);
  void step() override;

 private:
  AdagradOptions options_;
  std::vector<Tensor> sum_;       // per parameter
  std::vector<int64_t> steps_;    // per parameter
};

}  // namespace ferry
