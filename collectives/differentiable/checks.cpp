#include <ferry/collectives/differentiable/checks.h>

#include <ferry/runtime/error.h>

namespace ferry::detail {

void check_differentiable_input(const Variable& x, const Group& group, const char* op) {
  FERRY_CHECK(group.valid(), InvalidArgument, op, ": the group is null (this rank is not a "
              "member of it)");
  FERRY_CHECK(x.defined(), InvalidArgument, where(op, group),
              ": the input is an undefined variable");
  FERRY_CHECK(x.dtype() == DType::Float32 || x.dtype() == DType::Float64, InvalidArgument,
              where(op, group), ": differentiable collectives take float32 or float64, given ",
              dtype_name(x.dtype()));
}

void check_has_rows(const Variable& x, const Group& group, const char* op) {
  FERRY_CHECK(x.dim() >= 1, InvalidArgument, where(op, group),
              ": the input must have at least one dimension (rows along dim 0), given ",
              shape_str(x.shape()));
}

void check_rows_divisible(const Variable& x, const Group& group, const char* op) {
  FERRY_CHECK(x.size(0) % group.size() == 0, InvalidArgument, where(op, group),
              ": the input's rows (", x.size(0), ") must be a multiple of the group size (",
              group.size(), "), given shape ", shape_str(x.shape()));
}

int64_t shape_fingerprint(const Shape& shape, int64_t skip_dim) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  auto mix = [&h](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  mix(shape.size());
  for (size_t i = 0; i < shape.size(); ++i)
    mix(static_cast<int64_t>(i) == skip_dim ? ~0ull : static_cast<uint64_t>(shape[i]));
  return static_cast<int64_t>(h);
}

}  // namespace ferry::detail
