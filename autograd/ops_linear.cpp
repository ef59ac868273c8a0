// matmul, bmm and the transposes.
#include <ferry/autograd/ops.h>
#include <ferry/autograd/ops_detail.h>

namespace ferry {

Variable matmul(const Variable& a, const Variable& b) {
  Tensor y = kernels::matmul(detail::value_of("matmul", a, "a"),
                             detail::value_of("matmul", b, "b"));
  if (!detail::should_record({&a, &b})) return Variable(std::move(y));
  // dL/da = g b^T needs b; dL/db = a^T g needs a.
  detail::SavedTensor saved_a = detail::save_if(b.requires_grad(), a);
  detail::SavedTensor saved_b = detail::save_if(a.requires_grad(), b);
  return detail::record(
      "matmul", {&a, &b}, std::move(y),
      [saved_a, saved_b](const std::vector<Tensor>& g, const std::vector<bool>& needs) {
        std::vector<Tensor> out(2);
        if (needs[0]) out[0] = kernels::matmul(g[0], saved_b.get("matmul"), false, true);
        if (needs[1]) out[1] = kernels::matmul(saved_a.get("matmul"), g[0], true, false);
        return out;
      });
}

Variable linear(const Variable& x, const Variable& weight, const Variable& bias,
                Activation activation) {
  const Tensor& xv = detail::value_of("linear", x, "input");
  const Tensor& wv = detail::value_of("linear", weight, "weight");
  const bool has_bias = bias.defined();
  Tensor y = kernels::linear(xv, wv, has_bias ? detail::value_of("linear", bias, "bias") : Tensor(),
                             activation);
  const bool recording = has_bias ? detail::should_record({&x, &weight, &bias})
                                  : detail::should_record({&x, &weight});
  if (!recording) return Variable(std::move(y));
  // dx = g' w needs w; dw = g'^T x needs x; the ReLU mask needs y.
  detail::SavedTensor saved_x = detail::save_if(weight.requires_grad(), x);
  detail::SavedTensor saved_w = detail::save_if(x.requires_grad(), weight);
  detail::SavedTensor saved_y;
  if (activation == Activation::Relu) saved_y = detail::save_output("linear", y);
  auto backward = [saved_x, saved_w, saved_y, activation](const std::vector<Tensor>& g,
                                                          const std::vector<bool>& needs) {
    kernels::LinearGrads d = kernels::linear_backward(
        g[0], needs[1] ? saved_x.get("linear") : Tensor(),
        needs[0] ? saved_w.get("linear") : Tensor(),
        activation == Activation::Relu ? saved_y.get("linear") : Tensor(), activation, needs[0],
        needs[1], needs.size() > 2 && needs[2]);
    std::vector<Tensor> out = detail::tensor_list(needs.size() > 2 ? 3 : 2);
    out[0] = std::move(d.x);
    out[1] = std::move(d.w);
    if (needs.size() > 2) out[2] = std::move(d.b);
    return out;
  };
  if (has_bias) return detail::record("linear", {&x, &weight, &bias}, std::move(y), backward);
  return detail::record("linear", {&x, &weight}, std::move(y), backward);
}

Variable transpose(const Variable& a) {
  Tensor y = kernels::transpose(detail::value_of("transpose", a, "a"));
  if (!detail::should_record({&a})) return Variable(std::move(y));
  return detail::record("transpose", {&a}, std::move(y),
                        [](const std::vector<Tensor>& g, const std::vector<bool>&) {
                          return std::vector<Tensor>{kernels::transpose(g[0])};
                        });
}

Variable bmm(const Variable& a, const Variable& b) {
  Tensor y = kernels::bmm(detail::value_of("bmm", a, "a"), detail::value_of("bmm", b, "b"));
  if (!detail::should_record({&a, &b})) return Variable(std::move(y));
  // Per batch entry as matmul: dL/da = g b^T, dL/db = a^T g.
  detail::SavedTensor saved_a = detail::save_if(b.requires_grad(), a);
  detail::SavedTensor saved_b = detail::save_if(a.requires_grad(), b);
  return detail::record(
      "bmm", {&a, &b}, std::move(y),
      [saved_a, saved_b](const std::vector<Tensor>& g, const std::vector<bool>& needs) {
        std::vector<Tensor> out(2);
        if (needs[0]) out[0] = kernels::bmm(g[0], saved_b.get("bmm"), false, true);
        if (needs[1]) out[1] = kernels::bmm(saved_a.get("bmm"), g[0], true, false);
        return out;
      });
}

Variable transpose(const Variable& a, int64_t dim0, int64_t dim1) {
  Tensor y = kernels::transpose(detail::value_of("transpose", a, "a"), dim0, dim1);
  if (!detail::should_record({&a})) return Variable(std::move(y));
  // A transposition is its own inverse.
  return detail::record("transpose", {&a}, std::move(y),
                        [dim0, dim1](const std::vector<Tensor>& g, const std::vector<bool>&) {
                          return std::vector<Tensor>{kernels::transpose(g[0], dim0, dim1)};
                        });
}

}  // namespace ferry
