#include "collectives/engine.h"

#include "runtime/config.h"
#include "runtime/error.h"
#include "runtime/log.h"

#include <algorithm>

namespace ferry::detail {

Validator::Validator(const char* op, const Group& group) : op_(op), group_(group) {
  FERRY_CHECK(group.valid(), InvalidArgument, op,
              ": called on a null Group (ranks that split with kUndefinedColor get one)");
}

std::string Validator::prefix() const {
  return str(op_, " on rank ", group_.rank(), " of group ", group_.id(), " (size ",
             group_.size(), "): ");
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

void poison_after_wait_timeout(GroupImpl& group, const std::string& why) {
  group.poison(std::make_exception_ptr(TimeoutError("ferry: " + why)), why);
}

std::function<void(const std::string&)> poison_on_wait_timeout(const Group& group) {
  // Weak, so that a Work outliving its group does not keep it (and its worker) alive.
  return [weak = group.weak_impl()](const std::string& why) {
    if (auto g = weak.lock()) poison_after_wait_timeout(*g, why);
  };
}

OpSummary OpSummary::of(const Tensor& t) {
  OpSummary s;
  s.has_tensor = true;
  s.dtype = t.dtype();
  s.ndim = static_cast<int>(t.dim());
  for (int d = 0; d < std::min(s.ndim, kDims); ++d) s.dims[static_cast<size_t>(d)] = t.size(d);
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

namespace {

// The Work of an op queued on its group's executor. What describes it, lets a waiter run it and
// poisons the group after a user's wait expired lives here rather than in std::functions of
// WorkState, each of which would cost an allocation per op.
class QueuedWork final : public WorkState {
 public:
  explicit QueuedWork(OpDescription op) : WorkState(std::string()), op_(std::move(op)) {}

  std::string description() const override { return op_.format(); }

  bool help_one() override {
    auto g = op_.group.lock();  // weak: a Work may outlive its group (and its worker)
    return g && g->executor().run_one_here();
  }

  // A Work that a user gave up waiting for leaves the ranks out of step: poison the group.
  void wait_timed_out(const std::string& why) override {
    if (auto g = op_.group.lock()) poison_after_wait_timeout(*g, why);
  }

 private:
  OpDescription op_;  // formatted only when a message needs it
};

}  // namespace

Work submit(const Group& group, const char* op, OpSummary what, OpBody body) {
  GroupImpl& g = group.impl();
  g.throw_if_poisoned(op);
  // The sequence number and the queue position are taken together: two threads issuing on one
  // group at once must not queue seq 6 ahead of seq 5.
  std::lock_guard<std::mutex> issuing(g.issue_mutex());
  const uint64_t seq = g.take_sequence_number();
  std::shared_ptr<WorkState> state =
      std::make_shared<QueuedWork>(OpDescription(op, seq, std::move(what), group));
  state->self_timed = true;
  GroupImpl* gp = &g;
  g.executor().enqueue([gp, state_in = state, op, seq, body_in = std::move(body)]() mutable {
    // The task lets go of everything it holds (the body's tensor handles, its context) before
    // the op completes: a waiter that sees the op finished then holds the only handles to its
    // tensors. Autograd relies on that to keep a gradient a collective wrote as grad() instead
    // of copying it.
    std::shared_ptr<WorkState> state = std::move(state_in);
    OpBody body = std::move(body_in);
    std::exception_ptr error;
    bool tell_peers = true;
    try {
      gp->throw_if_poisoned(op);
      FERRY_LOG(Trace, "coll", state->description(), " starts");
      std::vector<Tensor> outputs;
      {
        OpContext ctx(*gp, op, seq, Clock::now() + default_timeout());
        outputs = body(ctx);
      }
      body = nullptr;
      FERRY_LOG(Trace, "coll", state->description(), " done");
      state->complete(std::move(outputs));
      return;
    } catch (const OwnDeadlineExpired&) {
      // Every rank stuck in this op times out by itself and names the absent ones: telling the
      // others now would race their own diagnosis.
      error = std::current_exception();
      tell_peers = false;
    } catch (...) {
      // Anything else (a dead or mismatched peer, a poisoned group, a user who gave up): the
      // peers waiting on this rank would wait until their deadline, so give up on the group.
      error = std::current_exception();
    }
    const std::string why = error_message(error);
    gp->poison(error, why);
    if (tell_peers) gp->transport().abandon_group(gp->id(), why);
    state->fail(error);
  });
  return Work(state);
}

Shape with_rows(const Shape& shape, int64_t rows) {
  Shape s = shape.empty() ? Shape{1} : shape;
  s[0] = rows;
  return s;
}

size_t row_bytes(const Tensor& t) {
  if (t.dim() == 0) return t.element_size();
  return t.size(0) == 0 ? static_cast<size_t>(shape_numel(with_rows(t.shape(), 1))) * t.element_size()
                        : t.nbytes() / static_cast<size_t>(t.size(0));
}

}  // namespace ferry::detail
