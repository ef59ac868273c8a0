#include <ferry/collectives/engine/validator.h>

#include <ferry/runtime/error.h>

namespace ferry::detail {

void check_group(const Group& group, const char* op) {
  FERRY_CHECK(group.valid(), InvalidArgument, op,
              ": called on a null Group (this rank is not a member of it: ranks that split with "
              "kUndefinedColor get one)");
}

Validator::Validator(const char* op, const Group& group) : op_(op), group_(group) {
  check_group(group, op);
}

std::string Validator::prefix() const {
  return where(op_, group_) + ": ";
}

void Validator::fail(const std::string& what) const {
  throw InvalidArgument("ferry: " + prefix() + what);
}

void Validator::defined(const Tensor& t, const char* name) const {
  if (!t.defined()) fail(str(name, " must be a defined tensor, given an undefined one"));
}

void Validator::same_dtype(const Tensor& t, const char* name, DType expected,
                           const char* expected_from) const {
  if (t.dtype() != expected)
    fail(str(name, " must have dtype ", dtype_name(expected), " (that of ", expected_from,
             "), given ", dtype_name(t.dtype())));
}

void Validator::shape_is(const Tensor& t, const char* name, const Shape& expected) const {
  if (t.shape() != expected)
    fail(str(name, " must have shape ", shape_str(expected), ", given ", shape_str(t.shape())));
}

void Validator::shape_with_rows_is(const Tensor& t, const char* name, const Shape& like,
                                   int64_t rows) const {
  const Shape& s = t.shape();
  const size_t dims = like.empty() ? 1 : like.size();
  bool same = s.size() == dims && s[0] == rows;
  for (size_t d = 1; same && d < dims; ++d) same = s[d] == like[d];
  if (!same) shape_is(t, name, with_rows(like, rows));  // formats the message
}

void Validator::at_least_1d(const Tensor& t, const char* name) const {
  if (t.dim() < 1) fail(str(name, " must have at least one dimension, given a 0-d tensor"));
}

void Validator::at_least_1d(const Shape& shape, const char* name, const char* why) const {
  if (!shape.empty()) return;
  fail(str(name, " must have at least one dimension", why ? " (" : "", why ? why : "",
           why ? ")" : "", ", given a 0-d value"));
}

void Validator::rows_divisible(const Shape& shape, const char* name) const {
  at_least_1d(shape, name, "rows along dim 0");
  if (shape[0] % group_.size() != 0)
    fail(str(name, "'s rows (dim 0) must be a multiple of the group size ", group_.size(),
             ", given ", shape[0], " (shape ", shape_str(shape), ")"));
}

void Validator::float32_or_64(DType dtype, const char* name, const char* who) const {
  if (dtype != DType::Float32 && dtype != DType::Float64)
    fail(str(name, " must be float32 or float64 (", who, "), given ", dtype_name(dtype)));
}

void Validator::root(int root) const {
  if (root < 0 || root >= group_.size())
    fail(str("root must be in [0, ", group_.size(), "), given ", root));
}

int64_t Validator::sizes(const std::vector<int64_t>& sizes, const char* name) const {
  if (static_cast<int>(sizes.size()) != group_.size())
    fail(str(name, " must have one entry per rank (", group_.size(), "), given ", sizes.size()));
  int64_t total = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    if (sizes[k] < 0) fail(str(name, "[", k, "] must be >= 0, given ", sizes[k]));
    total += sizes[k];
  }
  return total;
}

void Validator::no_overlap(const Tensor& a, const char* an, const Tensor& b, const char* bn,
                           const Tensor& exact_ok) const {
  if (!a.overlaps(b)) return;
  if (exact_ok.defined() && b.raw_data() == exact_ok.raw_data() && b.nbytes() == exact_ok.nbytes())
    return;
  fail(str(bn, " must not overlap ", an,
           exact_ok.defined() ? " (except as exactly this rank's block)" : "",
           ", given overlapping tensors"));
}

void Validator::no_overlap(const Tensor& a, const char* an, const Tensor& b, const char* bn,
                           const void* exact_ok, size_t exact_bytes) const {
  if (!a.overlaps(b)) return;
  if (b.raw_data() == exact_ok && b.nbytes() == exact_bytes) return;
  fail(str(bn, " must not overlap ", an, " (except as exactly this rank's block), given ",
           "overlapping tensors"));
}

void Validator::reduce_op(ReduceOp op, DType dtype) const {
  if (op == ReduceOp::Avg && !is_floating(dtype))
    fail(str("avg needs a floating dtype, given ", dtype_name(dtype), " (use sum and divide)"));
}

void Validator::tensor_list(const std::vector<Tensor>& list, const char* name, DType dtype) const {
  if (static_cast<int>(list.size()) != group_.size())
    fail(str(name, " must hold one tensor per rank (", group_.size(), "), given ", list.size()));
  for (size_t k = 0; k < list.size(); ++k) {
    if (!list[k].defined()) fail(str(name, "[", k, "] must be a defined tensor"));
    if (list[k].dtype() != dtype)
      fail(str("every tensor of ", name, " must have dtype ", dtype_name(dtype), ", given ",
               dtype_name(list[k].dtype()), " at index ", k));
  }
}

}  // namespace ferry::detail
