#include <ferry/collectives/torchrec/models/mlp.h>

#include <ferry/autograd/ops.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/tensor.h>

#include <cmath>
#include <utility>

namespace ferry::torchrec {

Linear::Linear(int64_t in_features, int64_t out_features, uint64_t seed, DType dtype,
               const std::string& name)
    : in_(in_features), out_(out_features), name_(name) {
  FERRY_CHECK(in_features >= 1 && out_features >= 1, InvalidArgument, "Linear '", name,
              "': in_features and out_features must be >= 1 (got ", in_features, " and ",
              out_features, ")");
  FERRY_CHECK(dtype == DType::Float32 || dtype == DType::Float64, InvalidArgument, "Linear '",
              name, "': dtype ", dtype_name(dtype), " is not supported (float32 or float64)");
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  weight_ = Variable(uniform({out_features, in_features}, -bound, bound, seed * 2 + 1, dtype),
                     true, name + ".weight");
  bias_ = Variable(uniform({out_features}, -bound, bound, seed * 2 + 2, dtype), true,
                   name + ".bias");
}

Variable Linear::forward(const Variable& x, Activation activation) const {
  FERRY_CHECK(x.defined() && x.dim() == 2 && x.shape()[1] == in_, InvalidArgument,
              "Linear '", name_, "': expected input [B, ", in_, "] but got ",
              x.defined() ? shape_str(x.shape()) : std::string("an undefined Variable"));
  return linear(x, weight_, bias_, activation);
}

Mlp::Mlp(int64_t in_features, std::vector<int64_t> layer_sizes, uint64_t seed,
         Activation activation, DType dtype, const std::string& name)
    : in_(in_features), activation_(activation) {
  FERRY_CHECK(!layer_sizes.empty(), InvalidArgument, "Mlp '", name,
              "': needs at least one layer size");
  int64_t width = in_features;
  for (size_t l = 0; l < layer_sizes.size(); ++l) {
    layers_.emplace_back(width, layer_sizes[l], seed * 1000 + l, dtype,
                         std::string(name).append(".").append(std::to_string(l)));
    width = layer_sizes[l];
  }
}

Variable Mlp::forward(const Variable& x) const {
  Variable h = x;
  for (size_t l = 0; l < layers_.size(); ++l) {
    const bool last = l + 1 == layers_.size();
    const bool relu = activation_ == Activation::ReluAll || !last;
    h = layers_[l].forward(h, relu ? ferry::Activation::Relu : ferry::Activation::None);
  }
  return h;
}

std::vector<Variable> Mlp::parameters() const {
  std::vector<Variable> out;
  for (const Linear& layer : layers_) {
    out.push_back(layer.weight());
    out.push_back(layer.bias());
  }
  return out;
}

}  // namespace ferry::torchrec
