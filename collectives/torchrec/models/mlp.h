// ferry::torchrec::Linear and Mlp: the fully connected layers DLRM's dense and over arches are
// made of, on ferry's tape.
//
//   Mlp mlp(13, {64, 16}, /*seed=*/1);       // 13 -> 64 -> 16, ReLU after every layer
//   Variable h = mlp.forward(x);             // x [B, 13] -> [B, 16]
//
// Linear: y = x Wᵀ + b with W [out, in] and b [out] (torch's layout). Initialisation is
// deterministic: W and b uniform in [-1/sqrt(in), 1/sqrt(in)] (torch's default bound), drawn
// from `seed` (a layer's two tensors use seed * 2 + 1 and seed * 2 + 2, so distinct seeds give
// distinct layers). Parameters are leaf Variables that require grad, named "<name>.weight" and
// "<name>.bias" for optimizers and gradient averaging.
//
// Mlp: layers in order; with Activation::ReluAll a ReLU follows every layer (DLRM's dense arch),
// with ReluButLast every layer but the last (the over arch: its last layer gives logits). Layer
// l is seeded with seed * 1000 + l.
#pragma once

#include <ferry/autograd/tensor_math.h>
#include <ferry/autograd/variable.h>
#include <ferry/runtime/dtype.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ferry::torchrec {

class Linear {
 public:
  Linear(int64_t in_features, int64_t out_features, uint64_t seed, DType dtype = DType::Float32,
         const std::string& name = "linear");

  // act(x weight^T + bias) as one node (ferry::linear): x [B, in] -> [B, out].
  // InvalidArgument unless x is 2-D with `in` columns.
  Variable forward(const Variable& x, Activation activation = Activation::None) const;

  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  const Variable& weight() const { return weight_; }  // [out, in]
  const Variable& bias() const { return bias_; }      // [out]
  std::vector<Variable> parameters() const { return {weight_, bias_}; }

 private:
  int64_t in_ = 0;
  int64_t out_ = 0;
  std::string name_;
  Variable weight_;
  Variable bias_;
};

class Mlp {
 public:
  enum class Activation { ReluAll, ReluButLast };

  // layer_sizes: each layer's output width (at least one, each >= 1).
  Mlp(int64_t in_features, std::vector<int64_t> layer_sizes, uint64_t seed,
      Activation activation = Activation::ReluAll, DType dtype = DType::Float32,
      const std::string& name = "mlp");

  Variable forward(const Variable& x) const;  // [B, in] -> [B, layer_sizes.back()]

  int64_t in_features() const { return in_; }
  int64_t out_features() const { return layers_.back().out_features(); }
  const std::vector<Linear>& layers() const { return layers_; }
  // weight, bias of every layer in order.
  std::vector<Variable> parameters() const;

 private:
  int64_t in_ = 0;
  Activation activation_;
  std::vector<Linear> layers_;
};

}  // namespace ferry::torchrec
