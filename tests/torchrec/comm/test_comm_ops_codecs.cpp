// Codecs applied through the comm ops: the forward codec on the forward collective, the
// backward codec on the gradient collective, reductions in the encoded dtype, float64 values
// through a float32 codec. Each case compares the op with codecs against the same op without
// codecs on inputs that went through the codec's round trip (what the wire does to them).
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/torchrec/torchrec.h>
#include "tests/torchrec/comm_test_helpers.h"
#include "tests/differentiable/spmd_gradcheck.h"

using namespace ferry;
using namespace ferry::torchrec;
using trtest::expect_equal;
using trtest::forward_backward;

namespace {

QuantizedCommCodecs fp16_bf16() {
  QuantizedCommCodecs codecs;
  codecs.forward = std::make_shared<FbgemmQuantizedCommCodec>(CommType::FP16);
  codecs.backward = std::make_shared<FbgemmQuantizedCommCodec>(CommType::BF16);
  return codecs;
}

// The values a half-precision wire delivers: rounded once, widened back to `t`'s dtype.
Tensor through(const Tensor& t, DType wire) { return t.to(wire).to(t.dtype()); }

Tensor rank_values(const Shape& shape, const Group& g, uint64_t salt) {
  // Values with more mantissa than fp16 / bf16 keep, so that rounding shows.
  return uniform(shape, -3.0, 3.0, 40 + 7 * salt + g.rank(), DType::Float32);
}

}  // namespace

DG_CASE("torchrec codecs: fp16 forward / bf16 backward through the all-to-alls",
        "[torchrec][codecs]", 2, 3) {
  const int w = g.size();
  std::vector<int64_t> batch, dims;
  for (int j = 0; j < w; ++j) {
    batch.push_back(1 + j % 2);
    dims.push_back(2 + j);
  }
  int64_t rows = 0;
  for (int64_t b : batch) rows += b;
  const All2AllPooledInfo info(batch, dims);
  const Tensor x = rank_values({rows, dims[g.rank()]}, g, 0);
  int64_t total_dims = 0;
  for (int64_t d : dims) total_dims += d;
  const Tensor grad = rank_values({batch[g.rank()], total_dims}, g, 1);
  const auto coded = forward_backward(
      [&](const Variable& v) { return alltoall_pooled(v, info, g, fp16_bf16()).wait(); }, x, grad);
  const auto plain = forward_backward(
      [&](const Variable& v) { return alltoall_pooled(v, info, g).wait(); },
      through(x, DType::Float16), through(grad, DType::BFloat16));
  expect_equal(coded.outputs[0], plain.outputs[0], g, "alltoall_pooled fp16 forward");
  expect_equal(coded.input_grads[0], plain.input_grads[0], g, "alltoall_pooled bf16 backward");
  dgtest::expect(!equal(coded.outputs[0], forward_backward(
      [&](const Variable& v) { return alltoall_pooled(v, info, g).wait(); }, x, grad).outputs[0]),
      g, "the fp16 codec changed nothing: the case cannot tell a codec from none");

  // float64 values: encoded as float32 -> fp16, decoded back to float64.
  const Tensor x64 = x.to(DType::Float64);
  const auto coded64 = forward_backward(
      [&](const Variable& v) { return alltoall_pooled(v, info, g, fp16_bf16()).wait(); }, x64,
      grad.to(DType::Float64));
  expect_equal(coded64.outputs[0], plain.outputs[0].to(DType::Float64), g,
               "float64 through the fp16 codec");

  // alltoallv: the backward codec works here (torchrec's fails on its tuple).
  std::vector<int64_t> out_split(w, 2);
  const Tensor table = rank_values({5, 2}, g, 2);
  const auto v_coded = trtest::forward_backward(
      [&](const std::vector<Variable>& in) {
        return alltoallv(in, g, out_split, std::nullopt, fp16_bf16()).wait();
      },
      {table}, [&] {
        std::vector<Tensor> gs;
        const int64_t b = 5 / w + (g.rank() < 5 % w ? 1 : 0);
        for (int i = 0; i < w; ++i) gs.push_back(rank_values({b, 2}, g, 10 + i));
        return gs;
      }());
  const auto v_plain = trtest::forward_backward(
      [&](const std::vector<Variable>& in) { return alltoallv(in, g, out_split).wait(); },
      {through(table, DType::Float16)}, [&] {
        std::vector<Tensor> gs;
        const int64_t b = 5 / w + (g.rank() < 5 % w ? 1 : 0);
        for (int i = 0; i < w; ++i)
          gs.push_back(through(rank_values({b, 2}, g, 10 + i), DType::BFloat16));
        return gs;
      }());
  for (int i = 0; i < w; ++i)
    expect_equal(v_coded.outputs[i], v_plain.outputs[i], g, "alltoallv fp16 forward");
  expect_equal(v_coded.input_grads[0], v_plain.input_grads[0], g, "alltoallv bf16 backward");
}

DG_CASE("torchrec codecs: reduce-scatter and all-gather reduce in the encoded dtype",
        "[torchrec][codecs]", 2) {
  const Tensor x = rank_values({4, 3}, g, 3);
  const Tensor grad = rank_values({2, 3}, g, 4);
  const auto coded = forward_backward(
      [&](const Variable& v) { return reduce_scatter_base_pooled(v, g, fp16_bf16()).wait(); }, x,
      grad);
  const auto plain = forward_backward(
      [&](const Variable& v) { return reduce_scatter_base_pooled(v, g).wait(); },
      through(x, DType::Float16), through(grad, DType::BFloat16));
  // Two fp16 values add exactly in float32; the fp16 reduction then rounds the sum once.
  expect_equal(coded.outputs[0], through(plain.outputs[0], DType::Float16), g,
               "reduce-scatter summed in fp16");
  expect_equal(coded.input_grads[0], plain.input_grads[0], g, "all-gather of bf16 gradients");

  const Tensor y = rank_values({2, 3}, g, 5);
  const Tensor gy = rank_values({4, 3}, g, 6);
  const auto ag = forward_backward(
      [&](const Variable& v) { return all_gather_base_pooled(v, g, fp16_bf16()).wait(); }, y, gy);
  const auto ag_plain = forward_backward(
      [&](const Variable& v) { return all_gather_base_pooled(v, g).wait(); },
      through(y, DType::Float16), through(gy, DType::BFloat16));
  expect_equal(ag.outputs[0], ag_plain.outputs[0], g, "all-gather in fp16");
  // The plain gradient is (sum of two bf16 values) / 2; the bf16 reduction rounds the sum.
  Tensor expected = ag_plain.input_grads[0].clone();
  expected.vec<float>() *= 2.0f;
  expected = through(expected, DType::BFloat16);
  expected.vec<float>() /= 2.0f;
  expect_equal(ag.input_grads[0], expected, g, "reduce-scatter of gradients summed in bf16");
}

DG_CASE("torchrec codecs: INT8 row-wise through alltoall_pooled is the per-row round trip",
        "[torchrec][codecs]", 2) {
  // Blocks of 2 rows x 16 columns = 32 values: every block a whole number of INT8 rows.
  const All2AllPooledInfo info({2, 2}, {16, 16});
  const Tensor x = rank_values({4, 16}, g, 7);
  QuantizedCommCodecs codecs;
  codecs.forward = std::make_shared<FbgemmQuantizedCommCodec>(CommType::INT8);
  const FbgemmQuantizedCommCodec reference(CommType::INT8);
  auto ctx = reference.create_context();
  const Tensor round_trip =
      reference.decode(reference.encode(x.flatten(), &*ctx), &*ctx).reshape(x.shape());
  const Tensor coded = alltoall_pooled(Variable(x), info, g, codecs).wait().value();
  const Tensor plain = alltoall_pooled(Variable(round_trip), info, g).wait().value();
  expect_equal(coded, plain, g, "INT8 forward");
  dgtest::expect(!equal(round_trip, x), g, "INT8 changed nothing: the case cannot tell");
}

// A codec in one direction only. With the backward one, the forward moves through the op's
// layouts (its blocks land in their columns) and the gradient through the packed wire buffer:
// the two paths meet in one op. With the forward one, both directions take the packed path
// (an op is placed only when its forward passes the values through).
DG_CASE("torchrec codecs: a codec in one direction only, the other through the layouts",
        "[torchrec][codecs]", 2, 3) {
  const int w = g.size();
  std::vector<int64_t> batch, dims;
  for (int j = 0; j < w; ++j) {
    batch.push_back(2 - j % 2);
    dims.push_back(3 + j);
  }
  int64_t rows = 0, total_dims = 0;
  for (int64_t b : batch) rows += b;
  for (int64_t d : dims) total_dims += d;
  const All2AllPooledInfo info(batch, dims);
  const Tensor x = rank_values({rows, dims[g.rank()]}, g, 2);
  const Tensor grad = rank_values({batch[g.rank()], total_dims}, g, 3);
  const auto plain = forward_backward(
      [&](const Variable& v) { return alltoall_pooled(v, info, g).wait(); }, x,
      through(grad, DType::BFloat16));
  QuantizedCommCodecs backward_only;
  backward_only.backward = std::make_shared<FbgemmQuantizedCommCodec>(CommType::BF16);
  const auto placed_forward = forward_backward(
      [&](const Variable& v) { return alltoall_pooled(v, info, g, backward_only).wait(); }, x,
      grad);
  expect_equal(placed_forward.outputs[0], plain.outputs[0], g, "placed forward");
  expect_equal(placed_forward.input_grads[0], plain.input_grads[0], g, "packed bf16 backward");

  QuantizedCommCodecs forward_only;
  forward_only.forward = std::make_shared<FbgemmQuantizedCommCodec>(CommType::FP16);
  const auto reference = forward_backward(
      [&](const Variable& v) { return alltoall_pooled(v, info, g).wait(); },
      through(x, DType::Float16), grad);
  const auto placed_backward = forward_backward(
      [&](const Variable& v) { return alltoall_pooled(v, info, g, forward_only).wait(); }, x,
      grad);
  expect_equal(placed_backward.outputs[0], reference.outputs[0], g, "packed fp16 forward");
  expect_equal(placed_backward.input_grads[0], reference.input_grads[0], g, "plain backward after a coded forward");
}
