// Differentiable ops on Variables: the math a trainer's forward is written in.
//
// Every op computes its value eagerly (with ferry::kernels) and, when grad mode is on and an
// input requires grad, records one node on the tape whose backward is the op's exact derivative
// (torch's, for the same op). Common contract:
//  - Inputs are float32 or float64 and share one dtype; anything else throws InvalidArgument
//    "<op>: dtype int32 is not supported (float32 or float64)".
//  - Arguments are validated before anything is computed or recorded; a shape error names the
//    op and the shapes involved.
//  - Results are fresh tensors, except reshape, narrow, split and chunk, whose results are
//    views sharing the input's storage where the slice is contiguous (as torch's are).
//  - A node keeps only what its backward needs. If a tensor it saved is modified in place before
//    backward, backward throws InvalidArgument naming the variable.
//  - Inputs that do not require grad get no gradient (and cost no backward work).
#pragma once

#include <ferry/autograd/tensor_math.h>
#include <ferry/autograd/variable.h>
#include <ferry/runtime/tensor.h>

#include <cstdint>
#include <vector>

namespace ferry {

// ---- arithmetic ----
// Shapes combine as in kernels::broadcast_shape: equal shapes, a [M] bias against a [..., M]
// operand (either side), or a 0-d operand against anything. The gradient of a broadcast operand
// is summed back to its shape.
Variable add(const Variable& a, const Variable& b);
Variable sub(const Variable& a, const Variable& b);
Variable mul(const Variable& a, const Variable& b);
Variable div(const Variable& a, const Variable& b);
// With a double: it is rounded to the variable's dtype, and has no gradient. div(a, s) is a true
// division and div(s, a) computes s / a (torch computes s * (1 / a), one rounding more).
Variable add(const Variable& a, double s);
Variable add(double s, const Variable& a);
Variable sub(const Variable& a, double s);
Variable sub(double s, const Variable& a);
Variable mul(const Variable& a, double s);
Variable mul(double s, const Variable& a);
Variable div(const Variable& a, double s);
Variable div(double s, const Variable& a);
Variable neg(const Variable& a);

Variable operator+(const Variable& a, const Variable& b);
Variable operator+(const Variable& a, double s);
Variable operator+(double s, const Variable& a);
Variable operator-(const Variable& a, const Variable& b);
Variable operator-(const Variable& a, double s);
Variable operator-(double s, const Variable& a);
Variable operator*(const Variable& a, const Variable& b);
Variable operator*(const Variable& a, double s);
Variable operator*(double s, const Variable& a);
Variable operator/(const Variable& a, const Variable& b);
Variable operator/(const Variable& a, double s);
Variable operator/(double s, const Variable& a);
Variable operator-(const Variable& a);

// ---- linear algebra ----
Variable matmul(const Variable& a, const Variable& b);  // [N, K] x [K, M] -> [N, M]
// torch.nn.functional.linear, optionally followed by a ReLU, as ONE node: act(x weight^T + bias)
// for x [N, K], weight [out, in] = [M, K], bias [M] or an undefined Variable (no bias). Neither
// the weight nor its gradient is transposed into a copy; the ReLU's gradient is 0 at 0, as torch.
Variable linear(const Variable& x, const Variable& weight, const Variable& bias,
                Activation activation = Activation::None);
Variable transpose(const Variable& a);                  // [N, M] -> [M, N] (a copy)
Variable bmm(const Variable& a, const Variable& b);      // [B, N, K] x [B, K, M] -> [B, N, M]
// Dims dim0 and dim1 exchanged (negative counts from the back), any rank (a copy).
Variable transpose(const Variable& a, int64_t dim0, int64_t dim1);

// ---- reductions ----
Variable sum(const Variable& x);   // 0-d
Variable mean(const Variable& x);  // 0-d; NaN for an empty x
// Along dim (negative counts from the back); keepdim keeps it with size 1. A 0-d x accepts
// dim 0 or -1.
Variable sum(const Variable& x, int64_t dim, bool keepdim = false);
Variable mean(const Variable& x, int64_t dim, bool keepdim = false);

// ---- shape ----
// A view with the same elements in `shape` (one entry may be -1, inferred).
Variable reshape(const Variable& x, Shape shape);
// Concatenation along dim (a copy). At least one input; all share dtype and every other dim.
Variable cat(const std::vector<Variable>& xs, int64_t dim = 0);
// Pieces along dim: of split_size each (the last may be shorter; an empty dim gives one empty
// piece), or of the given sizes (which must sum to size(dim)). One node for all pieces: pieces
// that receive no gradient contribute zeros.
std::vector<Variable> split(const Variable& x, int64_t split_size, int64_t dim = 0);
std::vector<Variable> split(const Variable& x, const std::vector<int64_t>& sizes,
                            int64_t dim = 0);
// torch.chunk: pieces of ceil(size(dim) / chunks), so there may be fewer than `chunks`; an empty
// dim gives `chunks` empty pieces.
std::vector<Variable> chunk(const Variable& x, int64_t chunks, int64_t dim = 0);
// Elements [start, start + length) along dim; a negative start counts from the back.
Variable narrow(const Variable& x, int64_t dim, int64_t start, int64_t length);

// ---- indexing ----
// Slices of x along dim picked by `indices` (int64, 1-D, each in [0, size(dim))). The gradient
// adds each picked slice's gradient back into place (repeated indices accumulate).
Variable index_select(const Variable& x, int64_t dim, const Tensor& indices);
// torch.nn.functional.embedding_bag (include_last_offset = false); see kernels::embedding_bag
// for the rules on indices, offsets and per_sample_weights (which may be an undefined Variable
// and is allowed only with Sum). Differentiable in weight and per_sample_weights. [B, D].
Variable embedding_bag(const Variable& weight, const Tensor& indices, const Tensor& offsets,
                       EmbeddingBagMode mode = EmbeddingBagMode::Sum,
                       const Variable& per_sample_weights = Variable());

// ---- activations ----
Variable relu(const Variable& x);  // gradient 0 at x == 0, as torch
Variable sigmoid(const Variable& x);
Variable tanh(const Variable& x);
Variable exp(const Variable& x);
Variable log(const Variable& x);
// Over the last dim of a 2-D [N, M] input (each row), computed stably.
Variable softmax(const Variable& x);
Variable log_softmax(const Variable& x);

// ---- losses ----
// input and target have equal shapes. Both are differentiable (the target's gradient is the
// true derivative: -d/d(input) for mse_loss, -input * grad for the BCE, which is linear in its
// target). Mean and Sum give a 0-d loss, None the elementwise one.
Variable mse_loss(const Variable& input, const Variable& target,
                  Reduction reduction = Reduction::Mean);
// max(x, 0) - x t + log(1 + exp(-|x|)): the logistic loss of logits x against targets t.
Variable binary_cross_entropy_with_logits(const Variable& input, const Variable& target,
                                          Reduction reduction = Reduction::Mean);

}  // namespace ferry
