// ferry::kernels: the tensor math behind the differentiable ops (not differentiable themselves).
//
// Every kernel takes float32 or float64 tensors (anything else throws InvalidArgument
// "<op>: dtype int32 is not supported (float32 or float64)"), validates its arguments before
// computing, and returns a fresh contiguous tensor that never aliases an input, so a caller may
// write to the result in place. Operands of one call must share a dtype. Error messages name the
// op (the name of the differentiable op built on the kernel) and the shapes involved.
#pragma once

#include <ferry/runtime/tensor.h>

#include <cstdint>

namespace ferry {

// How a loss reduces its elementwise values (torch's `reduction=`).
enum class Reduction { None, Mean, Sum };
// How embedding_bag pools the rows of one bag (torch's `mode=`).
enum class EmbeddingBagMode { Sum, Mean };
// What a fused linear layer applies to its output (kernels::linear, ferry::linear).
enum class Activation { None, Relu };

const char* reduction_name(Reduction r);        // "none", "mean", "sum"
const char* embedding_bag_mode_name(EmbeddingBagMode m);  // "sum", "mean"

namespace kernels {

// Throws InvalidArgument naming `op` unless t is defined and float32 or float64.
void check_float(const char* op, const Tensor& t);

// ---- elementwise binary (a op b) ----
// Shapes combine in exactly three ways: equal shapes; a [M] operand against a [..., M] operand
// of rank >= 2 (a bias added to every row, on either side); or a 0-d operand against anything.
// The result has the larger shape. Anything else throws InvalidArgument naming both shapes.
Shape broadcast_shape(const char* op, const Shape& a, const Shape& b);
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
// The gradient of an operand of `shape` from the gradient of a broadcast result: sums over the
// rows when shape is [M] and grad is [..., M], over everything when shape is 0-d, and copies
// when the shapes are equal. `op` names the caller in errors.
Tensor reduce_to_shape(const char* op, const Tensor& grad, const Shape& shape);

// ---- with a double (converted to the tensor's dtype first, as torch does) ----
Tensor add(const Tensor& a, double s);         // a + s
Tensor mul(const Tensor& a, double s);         // a * s
Tensor div(const Tensor& a, double s);         // a / s, a true division (not a * (1/s))
Tensor scalar_sub(double s, const Tensor& a);  // s - a
Tensor scalar_div(double s, const Tensor& a);  // s / a
Tensor neg(const Tensor& a);

// ---- linear algebra ----
// [N, K] x [K, M] -> [N, M], where a (b) is read transposed when transpose_a (transpose_b): the
// backward of a matrix product needs a^T g and g b^T, and Eigen reads those without a copy.
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a = false,
              bool transpose_b = false);
Tensor transpose(const Tensor& a);                // [N, M] -> [M, N], a copy
// Batched: [B, N, K] x [B, K, M] -> [B, N, M], one matrix product per batch entry, with the same
// transposition flags applied to every a[b] (b[b]).
Tensor bmm(const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false);
// Dims dim0 and dim1 (negative counts from the back) exchanged, any rank, a copy.
Tensor transpose(const Tensor& a, int64_t dim0, int64_t dim1);

// ---- fully connected layer ----
// torch.nn.functional.linear with an optional ReLU: act(x w^T + b) for x [N, K], w [M, K] (the
// [out, in] layout, read transposed by the GEMM without a copy) and b [M] (undefined: no bias).
// The bias and the activation are applied in one pass over the GEMM's output.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b, Activation act);
// Its backward from g = dL/dy and the forward's output y (read only for Relu, whose mask is
// y > 0, the same as the pre-activation's > 0 with torch's gradient 0 at 0). Each gradient is
// computed only when asked for (else undefined): dx = g' w, dw = g'^T x, db = sum of g' over
// rows, with g' = g masked by the activation.
struct LinearGrads {
  Tensor x, w, b;
};
LinearGrads linear_backward(const Tensor& g, const Tensor& x, const Tensor& w, const Tensor& y,
                            Activation act, bool need_x, bool need_w, bool need_b);

// ---- reductions ----
Tensor sum(const Tensor& a);   // 0-d; 0 for an empty tensor
Tensor mean(const Tensor& a);  // 0-d; NaN for an empty tensor (0 / 0, as torch)
// Along `dim` (negative counts from the back). keepdim keeps it with size 1. A 0-d tensor
// accepts dim 0 or -1 and is returned as a copy (torch treats it as one element).
Tensor sum(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor mean(const Tensor& a, int64_t dim, bool keepdim = false);
// The backward of the reductions: repeats a reduced gradient over the reduced elements.
// expand_scalar: a 0-d (or one-element) grad to every element of `shape`.
Tensor expand_scalar(const Tensor& grad, const Shape& shape);
// expand_dim: grad (shape with `dim` removed or kept as 1) along `dim` of `shape`.
Tensor expand_dim(const Tensor& grad, const Shape& shape, int64_t dim);

// ---- indexing ----
// Rows (slices along `dim`) of a picked by int64 indices in [0, size(dim)); result size(dim) is
// indices.numel(). indices must be 1-D.
Tensor index_select(const Tensor& a, int64_t dim, const Tensor& indices);
// Its adjoint: zeros of `shape` with slice j of src added to slice indices[j] along `dim`
// (repeated indices accumulate).
Tensor index_add(const Shape& shape, int64_t dim, const Tensor& indices, const Tensor& src);

// torch.nn.functional.embedding_bag with include_last_offset=False: bag b pools the rows
// weight[indices[k]] for k in [offsets[b], offsets[b+1]) (the last bag ends at indices.numel()).
// weight is [V, D]; indices [n] and offsets [B] are int64; offsets[0] == 0 (when B > 0), offsets
// never decrease and stay <= n; B == 0 requires n == 0. per_sample_weights (may be undefined)
// is [n] of weight's dtype and only allowed with Sum: each row is scaled by its weight. Mean
// divides by the bag's size. An empty bag gives a zero row. Result [B, D].
Tensor embedding_bag(const Tensor& weight, const Tensor& indices, const Tensor& offsets,
                     EmbeddingBagMode mode, const Tensor& per_sample_weights = Tensor());
// d/d(weight) of embedding_bag, given grad [B, D]: a [V, D] tensor (V = num_weights).
Tensor embedding_bag_weight_grad(const Tensor& grad, const Tensor& indices,
                                 const Tensor& offsets, EmbeddingBagMode mode,
                                 const Tensor& per_sample_weights, int64_t num_weights);
// d/d(per_sample_weights): element k is <grad[bag of k], weight[indices[k]]>. Result [n].
Tensor embedding_bag_per_sample_weights_grad(const Tensor& grad, const Tensor& weight,
                                             const Tensor& indices, const Tensor& offsets);

// ---- activations (elementwise) and their backward helpers ----
// Backward helpers take the output gradient and what the derivative is cheapest from: the
// input x (relu, log) or the output y (sigmoid, tanh; exp's is mul(grad, y)).
Tensor relu(const Tensor& x);
// grad where x > 0, else 0; x may also be relu's output, which is > 0 exactly where x is.
Tensor relu_backward(const Tensor& grad, const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor sigmoid_backward(const Tensor& grad, const Tensor& y);  // grad * y * (1 - y)
Tensor tanh(const Tensor& x);
Tensor tanh_backward(const Tensor& grad, const Tensor& y);  // grad * (1 - y^2)
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);  // -inf at 0, NaN below (IEEE, as torch)

// Over the last dim of a 2-D [N, M] tensor, stable for large inputs (the row maximum is
// subtracted first). The backwards take the forward's output y.
Tensor softmax(const Tensor& x);
Tensor softmax_backward(const Tensor& grad, const Tensor& y);  // y * (grad - rowsum(grad * y))
Tensor log_softmax(const Tensor& x);
Tensor log_softmax_backward(const Tensor& grad, const Tensor& y);  // grad - exp(y) rowsum(grad)

// ---- losses ----
// input and target have equal shapes. None gives the elementwise loss (input's shape); Sum and
// Mean a 0-d tensor (Mean of nothing is NaN, as torch). The backward helpers take the gradient
// of the loss (0-d for Sum and Mean, input-shaped for None) and return the gradient of input
// or target.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
// 2 (input - target) * grad [/ numel for Mean]; the target's gradient is its negation.
Tensor mse_loss_backward(const Tensor& grad, const Tensor& input, const Tensor& target,
                         Reduction reduction);
// max(x, 0) - x t + log1p(exp(-|x|)): exact for any finite x (no exp overflow).
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        Reduction reduction = Reduction::Mean);
// (sigmoid(x) - t) * grad [/ numel for Mean].
Tensor binary_cross_entropy_with_logits_backward(const Tensor& grad, const Tensor& input,
                                                 const Tensor& target, Reduction reduction);
// -x * grad [/ numel for Mean]: the loss is linear in the target.
Tensor binary_cross_entropy_with_logits_target_backward(const Tensor& grad, const Tensor& input,
                                                        Reduction reduction);

}  // namespace kernels
}  // namespace ferry
