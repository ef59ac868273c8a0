#include <ferry/collectives/differentiable/checks.h>

#include <ferry/collectives/engine/validator.h>

namespace ferry::detail {

// In the raw collectives' words (the Validator's): "<op> on rank R of group G (size W): <what
// was expected>, given <what was given>".

void check_differentiable_input(const Variable& x, const Group& group, const char* op) {
  const Validator v(op, group);
  if (!x.defined()) v.fail("the input must be a defined variable, given an undefined one");
  v.float32_or_64(x.dtype(), "the input", "what differentiable collectives take");
}

void check_has_rows(const Variable& x, const Group& group, const char* op) {
  Validator(op, group).at_least_1d(x.shape(), "the input", "rows along dim 0");
}

void check_rows_divisible(const Variable& x, const Group& group, const char* op) {
  Validator(op, group).rows_divisible(x.shape(), "the input");
}

void check_per_rank(const std::vector<int64_t>& sizes, const char* name, const Group& group,
                    const char* op) {
  Validator(op, group).sizes(sizes, name);
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
