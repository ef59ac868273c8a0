// matmul and transpose.
#include "autograd/ops.h"
#include "autograd/ops_detail.h"

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

Variable transpose(const Variable& a) {
  Tensor y = kernels::transpose(detail::value_of("transpose", a, "a"));
  if (!detail::should_record({&a})) return Variable(std::move(y));
  return detail::record("transpose", {&a}, std::move(y),
                        [](const std::vector<Tensor>& g, const std::vector<bool>&) {
                          return std::vector<Tensor>{kernels::transpose(g[0])};
                        });
}

}  // namespace ferry
