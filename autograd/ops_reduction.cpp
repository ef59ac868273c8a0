// sum and mean, over everything or along one dim.
#include <ferry/autograd/ops.h>
#include <ferry/autograd/ops_detail.h>

namespace ferry {

namespace {

using Grads = std::vector<Tensor>;
using Needs = std::vector<bool>;

// Each element of x receives the reduced gradient divided by `count` (1 for sum).
Variable reduce_all(const char* op, const Variable& x, Tensor y, double count) {
  if (!detail::should_record({&x})) return Variable(std::move(y));
  return detail::record(op, {&x}, std::move(y),
                        [shape = x.shape(), count](const Grads& g, const Needs&) {
                          const Tensor scaled = count == 1 ? g[0] : kernels::div(g[0], count);
                          return Grads{kernels::expand_scalar(scaled, shape)};
                        });
}

Variable reduce_dim(const char* op, const Variable& x, Tensor y, int64_t dim, bool average) {
  if (!detail::should_record({&x})) return Variable(std::move(y));
  // A 0-d x is reduced along its single implied element.
  const double count = x.dim() == 0 ? 1.0 : static_cast<double>(x.size(dim));
  return detail::record(op, {&x}, std::move(y),
                        [shape = x.shape(), dim, average, count](const Grads& g, const Needs&) {
                          const Tensor scaled = average ? kernels::div(g[0], count) : g[0];
                          return Grads{kernels::expand_dim(scaled, shape, dim)};
                        });
}

}  // namespace

Variable sum(const Variable& x) {
  return reduce_all("sum", x, kernels::sum(detail::value_of("sum", x, "x")), 1.0);
}

Variable mean(const Variable& x) {
  Tensor y = kernels::mean(detail::value_of("mean", x, "x"));
  return reduce_all("mean", x, std::move(y), static_cast<double>(x.numel()));
}

Variable sum(const Variable& x, int64_t dim, bool keepdim) {
  Tensor y = kernels::sum(detail::value_of("sum", x, "x"), dim, keepdim);
  return reduce_dim("sum", x, std::move(y), dim, false);
}

Variable mean(const Variable& x, int64_t dim, bool keepdim) {
  Tensor y = kernels::mean(detail::value_of("mean", x, "x"), dim, keepdim);
  return reduce_dim("mean", x, std::move(y), dim, true);
}

}  // namespace ferry
