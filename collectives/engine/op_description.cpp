#include <ferry/collectives/engine/op_description.h>

#include <ferry/collectives/engine/group_impl.h>
#include <ferry/runtime/error.h>

#include <algorithm>

namespace ferry::detail {

OpSummary OpSummary::of(const Tensor& t) {
  OpSummary s;
  s.has_tensor = true;
  s.dtype = t.dtype();
  // One look at the shape: every accessor of the tensor checks it is defined again.
  const Shape& shape = t.shape();
  s.ndim = static_cast<int>(shape.size());
  int64_t elements = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (d < static_cast<size_t>(kDims)) s.dims[d] = shape[d];
    elements *= shape[d];
  }
  s.agreed = elements;
  return s;
}

OpSummary OpSummary::of(const Tensor& t, ReduceOp op) {
  OpSummary s = of(t);
  s.has_reduce_op = true;
  s.reduce_op = op;
  return s;
}

OpSummary OpSummary::of_lists(DType dtype) {
  OpSummary s;
  s.lists = true;
  s.dtype = dtype;
  return s;
}

namespace {

// FNV-1a over one size's bytes.
uint64_t hash_size(uint64_t h, int64_t v) {
  for (int b = 0; b < 8; ++b)
    h = (h ^ ((static_cast<uint64_t>(v) >> (8 * b)) & 0xFF)) * 1099511628211ull;
  return h;
}
constexpr uint64_t kHashStart = 1469598103934665603ull;

}  // namespace

OpSummary& OpSummary::with_splits(const std::vector<int64_t>& sizes) {
  uint64_t h = kHashStart;
  for (int64_t v : sizes) h = hash_size(h, v);
  splits = h == 0 ? 1 : h;
  return *this;
}

OpSummary& OpSummary::with_equal_splits(int blocks, int64_t size) {
  uint64_t h = kHashStart;
  for (int k = 0; k < blocks; ++k) h = hash_size(h, size);
  splits = h == 0 ? 1 : h;
  return *this;
}

std::string OpSummary::format() const {
  std::string out;
  if (lists) out.append("(").append(dtype_name(dtype)).append(" lists)");
  if (has_tensor || has_reduce_op) {
    out += "(";
    if (has_reduce_op) out.append(reduce_op_name(reduce_op)).append(has_tensor ? ", " : "");
    if (has_tensor) {
      const Shape shown(dims.begin(), dims.begin() + std::min(ndim, kDims));
      std::string shape = shape_str(shown);
      if (ndim > kDims) shape.insert(shape.size() - 1, ", ...");
      out.append(dtype_name(dtype)).append(" ").append(shape);
    }
    out += ")";
  }
  if (root >= 0) out.append(" root ").append(std::to_string(root));
  out += note;
  return out;
}

OpDescription::OpDescription(const char* op, uint64_t seq, OpSummary what, const Group& group)
    : op(op), seq(seq), what(std::move(what)), group(group.weak_impl()), group_id(group.id()) {}

std::string OpDescription::format() const {
  const std::string summary = what.format();
  auto live = group.lock();
  return str(op, summary.empty() ? "" : " ", summary, " (seq ", seq, ") on ",
             live ? live->describe() : str("group ", group_id));
}

std::function<std::string()> describe_op(const char* op, uint64_t seq, OpSummary what,
                                         const Group& group) {
  return [d = OpDescription(op, seq, std::move(what), group)] { return d.format(); };
}

}  // namespace ferry::detail
