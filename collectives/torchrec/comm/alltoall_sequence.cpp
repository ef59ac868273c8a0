// alltoall_sequence (torchrec comm_ops): per-id embeddings back to the ranks that own the samples,
// and the recat helpers of SequenceEmbeddingsAllToAll.
#include <ferry/autograd/ops.h>
#include <ferry/collectives/torchrec/comm/alltoall_op.h>
#include <ferry/collectives/torchrec/comm/comm_ops.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/object_pool.h>

#include <algorithm>

namespace ferry::torchrec {
namespace {

using detail::list_str;
using detail::sum_of;
using detail::where;

constexpr const char* kSequence = "alltoall_sequence";

// An int32 / int64 tensor's values into `out` (typed reads: get_flat's per-element conversion
// cost more than the op's data movement at a few thousand ids).
void read_integers(const Tensor& t, std::vector<int64_t>& out) {
  const auto n = static_cast<size_t>(t.numel());
  if (t.dtype() == DType::Int64) {
    const int64_t* p = t.data<int64_t>();
    out.assign(p, p + n);
  } else {
    const int32_t* p = t.data<int32_t>();
    out.assign(p, p + n);
  }
}

bool is_integer(const Tensor& t) {
  return t.dtype() == DType::Int32 || t.dtype() == DType::Int64;
}

// Rows of `rows` ([N, D], flat) in segment order recat[0], recat[1], ...: output segment q is
// input segment recat[q], whose row count is segment_rows[recat[q]] (fbgemm's permute_2D /
// permute_1D_sparse_data on values of D elements per id). `start` is scratch.
Tensor permute_segments(const Tensor& rows, int64_t d, const std::vector<int64_t>& recat,
                        const std::vector<int64_t>& segment_rows, std::vector<int64_t>& start) {
  start.assign(segment_rows.size() + 1, 0);
  for (size_t s = 0; s < segment_rows.size(); ++s) start[s + 1] = start[s] + segment_rows[s];
  Tensor out = empty(rows.shape(), rows.dtype());
  const size_t row_bytes = static_cast<size_t>(d) * rows.element_size();
  const auto* src = static_cast<const char*>(rows.raw_data());
  auto* dst = static_cast<char*>(out.raw_data());
  for (int64_t s : recat) {
    const size_t n = static_cast<size_t>(segment_rows[s]) * row_bytes;
    std::copy_n(src + start[s] * row_bytes, n, dst);
    dst += n;
  }
  return out;
}

// What one call reads from its arguments and lays out: the permutation forward and its inverse
// backward over segments of known row counts, the block sizes and the placement. In lists that
// the calls on a thread hand on to each other (ThreadSpares), refilled rather than allocated:
// building them anew cost about twenty allocations per call.
struct SequencePlan {
  std::vector<int64_t> lengths;  // lengths_after_sparse_data_all2all's values
  bool permuted = false;         // the lists below hold a permutation that moves something
  // forward_recat and backward_recat hold a pair already checked (a permutation and its
  // inverse): a call whose recat tensors hold the same values skips the checks. torchrec's
  // SequenceEmbeddingsAllToAll makes its recat tensors once and passes them every batch.
  bool recat_checked = false;
  // The checked recat is 0, 1, 2, ...: segments stay in place (torchrec's recat for one
  // feature per rank), so the op moves them as if it had none.
  bool recat_identity = false;
  std::vector<int64_t> forward_recat, backward_recat;
  std::vector<int64_t> segment_rows;           // before the forward permutation
  std::vector<int64_t> permuted_segment_rows;  // after it (torchrec's permuted lengths)
  std::vector<int64_t> scratch;                // a permutation check's marks, segment starts
  detail::AllToAllCommOp::Splits splits;       // value elements per rank
  std::vector<BlockLayout> send_layouts, recv_layouts;
};
// By pointer: inside the op it would make the op too large for the pool (object_pool.h).
using PlanPtr = std::unique_ptr<SequencePlan>;
using PlanSpares = ferry::detail::ThreadSpares<PlanPtr>;

// Holds a call's plan for its op, and hands it back to this thread's spares when the op goes.
// A base of the op, so that the plan exists before the op's AllToAllCommOp part, which is given
// its splits.
class PlanHolder {
 public:
  explicit PlanHolder(PlanPtr plan) : plan_(std::move(plan)) {}
  PlanHolder(const PlanHolder&) = delete;
  PlanHolder& operator=(const PlanHolder&) = delete;
  ~PlanHolder() { PlanSpares::give(std::move(plan_)); }

 protected:
  // Without an owner: the op owns the plan, and its AllToAllCommOp part (destroyed first) is the
  // only holder of these pointers.
  std::shared_ptr<const detail::AllToAllCommOp::Splits> splits() const {
    return {std::shared_ptr<const void>(), &plan_->splits};
  }
  PlanPtr plan_;
};

class AllToAllSequenceOp final : private PlanHolder, public detail::AllToAllCommOp {
 public:
  AllToAllSequenceOp(Group group, const Codecs& codecs, int64_t dim, PlanPtr plan)
      : PlanHolder(std::move(plan)),
        AllToAllCommOp(kSequence, std::move(group), codecs, detail::Division::kTorchrec,
                       splits()),
        dim_(dim) {
    laid_out_.send.swap(plan_->send_layouts);
    laid_out_.recv.swap(plan_->recv_layouts);
  }
  ~AllToAllSequenceOp() override {
    laid_out_.send.swap(plan_->send_layouts);
    laid_out_.recv.swap(plan_->recv_layouts);
  }

 protected:
  Tensor forward_send(const std::vector<Tensor>& inputs) override {
    if (!plan_->permuted) return inputs[0];
    return permute_segments(inputs[0], dim_, plan_->forward_recat, plan_->segment_rows,
                            plan_->scratch);
  }
  // With a permutation and no codec, the segments are sent from where they lie in the input,
  // in recat order, and backward writes their gradients back there: no permuted copy. Without
  // one the blocks are plain runs, but still a Placement: whether a rank has a permutation
  // depends on its own features, and every rank of an exchange must use the same form (MPI
  // runs the laid-out one as a different collective).
  std::shared_ptr<const Placement> placement(const std::vector<Tensor>&) override {
    if (dim_ == 0) return nullptr;  // the same on every rank: the embedding dim
    laid_out_.output_shape = {sum_of(receives()) / dim_, dim_};
    lay_out_contiguous(receives(), laid_out_.recv);
    if (!plan_->permuted) {
      lay_out_contiguous(sends(), laid_out_.send);
    } else {
      lay_out_permuted();
    }
    // Without an owner, as splits(): the op owns the placement.
    return {std::shared_ptr<const void>(), &laid_out_};
  }
  std::vector<Tensor> forward_outputs(const Tensor& received) override {
    return detail::one_tensor(received.reshape({-1, dim_}));
  }
  Tensor gradient_send(const std::vector<Tensor>& grad_outputs, bool) override {
    return grad_outputs[0];
  }
  std::vector<Tensor> input_gradients(const Tensor& received) override {
    Tensor rows = received.reshape({-1, dim_});
    if (!plan_->permuted) return detail::one_tensor(rows);
    return detail::one_tensor(permute_segments(rows, dim_, plan_->backward_recat,
                                               plan_->permuted_segment_rows, plan_->scratch));
  }

 private:
  // Contiguous blocks of `sizes` elements one after the other into `layouts`, whose lists (the
  // plan's) keep their storage.
  static void lay_out_contiguous(const std::vector<int64_t>& sizes,
                                 std::vector<BlockLayout>& layouts) {
    layouts.resize(sizes.size());
    int64_t offset = 0;
    for (size_t k = 0; k < sizes.size(); ++k) {
      layouts[k].assign(1, StridedRun{offset, 1, sizes[k], 0});
      offset += sizes[k];
    }
  }
  // The input's segments in recat order, cut into the ranks' blocks (a segment may straddle
  // two blocks).
  void lay_out_permuted() {
    const std::vector<int64_t>& rows = plan_->segment_rows;
    std::vector<int64_t>& start = plan_->scratch;
    start.assign(rows.size() + 1, 0);
    for (size_t s = 0; s < rows.size(); ++s) start[s + 1] = start[s] + rows[s] * dim_;
    std::vector<BlockLayout>& send = laid_out_.send;
    send.resize(sends().size());
    for (BlockLayout& l : send) l.clear();
    size_t block = 0;
    int64_t room = sends().empty() ? 0 : sends()[0];  // elements block `block` still takes
    for (int64_t s : plan_->forward_recat) {
      int64_t at = start[s], left = rows[s] * dim_;
      while (left > 0) {
        while (room == 0) room = sends()[++block];
        const int64_t n = std::min(left, room);
        send[block].push_back(StridedRun{at, 1, n, 0});
        at += n;
        left -= n;
        room -= n;
      }
    }
  }

  int64_t dim_;
  Placement laid_out_;  // its layout lists are the plan's, lent for the op's life
};

// recat into `p`, checked to be a permutation of 0..n-1.
void read_permutation(const Tensor& recat, const char* name, int64_t n, const Group& group,
                      std::vector<int64_t>& p, std::vector<int64_t>& seen) {
  FERRY_CHECK(is_integer(recat), InvalidArgument, where(kSequence, group), ": ", name,
              " must be int32 or int64, given ", dtype_name(recat.dtype()));
  read_integers(recat, p);
  FERRY_CHECK(static_cast<int64_t>(p.size()) == n, InvalidArgument, where(kSequence, group),
              ": ", name, " has ", p.size(), " entries, forward_recat_tensor ", n);
  seen.assign(p.size(), 0);
  for (int64_t s : p) {
    FERRY_CHECK(s >= 0 && s < n && seen[s] == 0, InvalidArgument, where(kSequence, group), ": ",
                name, " must be a permutation of 0..", n - 1, ", given ", list_str(p));
    seen[s] = 1;
  }
}

// Whether integer tensor `t` holds exactly `values`.
bool holds(const Tensor& t, const std::vector<int64_t>& values) {
  if (!t.defined() || !is_integer(t) || t.numel() != static_cast<int64_t>(values.size()))
    return false;
  if (t.dtype() == DType::Int64)
    return std::equal(values.begin(), values.end(), t.data<int64_t>());
  return std::equal(values.begin(), values.end(), t.data<int32_t>());
}

// The plan's permutation, from the info and plan.lengths, for an input of `rows` rows.
void read_segment_permutation(const All2AllSequenceInfo& info, int64_t rows, const Group& group,
                              SequencePlan& plan) {
  const int64_t n = info.forward_recat_tensor.numel();
  if (!plan.recat_checked || !holds(info.forward_recat_tensor, plan.forward_recat) ||
      !holds(info.backward_recat_tensor, plan.backward_recat)) {
    plan.recat_checked = false;
    read_permutation(info.forward_recat_tensor, "forward_recat_tensor", n, group,
                     plan.forward_recat, plan.scratch);
    FERRY_CHECK(info.backward_recat_tensor.defined(), InvalidArgument, where(kSequence, group),
                ": forward_recat_tensor is given but backward_recat_tensor is not");
    read_permutation(info.backward_recat_tensor, "backward_recat_tensor", n, group,
                     plan.backward_recat, plan.scratch);
    for (int64_t q = 0; q < n; ++q) {
      FERRY_CHECK(plan.backward_recat[plan.forward_recat[q]] == q, InvalidArgument,
                  where(kSequence, group), ": backward_recat_tensor ",
                  list_str(plan.backward_recat), " is not the inverse of forward_recat_tensor ",
                  list_str(plan.forward_recat),
                  " (the backward would not be the forward's transpose)");
    }
    plan.recat_identity = true;
    for (int64_t q = 0; q < n; ++q) plan.recat_identity &= plan.forward_recat[q] == q;
    plan.recat_checked = true;
  }
  const std::vector<int64_t>& len = plan.lengths;
  if (info.variable_batch_size) {
    FERRY_CHECK(static_cast<int64_t>(len.size()) == n, InvalidArgument, where(kSequence, group),
                ": with variable_batch_size every length is a segment, so the recat needs ",
                len.size(), " entries, given ", n);
    plan.segment_rows.assign(len.begin(), len.end());
  } else {
    FERRY_CHECK(static_cast<int64_t>(len.size()) % n == 0, InvalidArgument,
                where(kSequence, group), ": lengths_after_sparse_data_all2all has ", len.size(),
                " entries, not a multiple of the ", n, " segments of forward_recat_tensor");
    const int64_t per = static_cast<int64_t>(len.size()) / n;
    plan.segment_rows.assign(n, 0);
    for (int64_t s = 0; s < n; ++s)
      for (int64_t b = 0; b < per; ++b) plan.segment_rows[s] += len[s * per + b];
  }
  FERRY_CHECK(sum_of(plan.segment_rows) == rows, InvalidArgument, where(kSequence, group),
              ": lengths_after_sparse_data_all2all adds up to ", sum_of(plan.segment_rows),
              " ids but the input has ", rows, " rows");
  plan.permuted_segment_rows.clear();
  for (int64_t q = 0; q < n; ++q)
    plan.permuted_segment_rows.push_back(plan.segment_rows[plan.forward_recat[q]]);
  plan.permuted = !plan.recat_identity;
}

// The info read and checked into a plan from this thread's spares.
PlanPtr plan_of(const Variable& x, const All2AllSequenceInfo& info, const Group& group) {
  const int64_t d = info.embedding_dim;
  PlanPtr kept = PlanSpares::take();
  if (!kept) kept = std::make_unique<SequencePlan>();
  SequencePlan& plan = *kept;
  plan.permuted = false;
  const Tensor& lengths = info.lengths_after_sparse_data_all2all;
  plan.lengths.clear();
  if (lengths.defined()) {
    FERRY_CHECK(is_integer(lengths), InvalidArgument, where(kSequence, group),
                ": lengths_after_sparse_data_all2all must be int32 or int64, given ",
                dtype_name(lengths.dtype()));
    read_integers(lengths, plan.lengths);
    detail::check_non_negative(plan.lengths, "lengths_after_sparse_data_all2all", group,
                               kSequence);
  }
  if (info.forward_recat_tensor.defined() && info.forward_recat_tensor.numel() > 0) {
    FERRY_CHECK(lengths.defined(), InvalidArgument, where(kSequence, group),
                ": forward_recat_tensor needs lengths_after_sparse_data_all2all");
    read_segment_permutation(info, x.size(0), group, plan);
  }
  plan.splits.send.clear();
  plan.splits.recv.clear();
  for (int i = 0; i < group.size(); ++i) {
    plan.splits.send.push_back(info.output_splits[i] * d);
    plan.splits.recv.push_back(info.input_splits[i] * d);
  }
  return kept;
}

}  // namespace

Awaitable<Variable> alltoall_sequence(const Variable& x, const All2AllSequenceInfo& info,
                                      const Group& group, const Codecs& codecs) {
  detail::check_input(x, group, kSequence);
  const int64_t d = info.embedding_dim;
  FERRY_CHECK(x.dim() == 2 && x.size(1) == d, InvalidArgument, where(kSequence, group),
              ": the input must be [ids, embedding_dim = ", d, "], given ", shape_str(x.shape()));
  detail::check_per_rank(info.input_splits, "input_splits", group, kSequence);
  detail::check_per_rank(info.output_splits, "output_splits", group, kSequence);
  FERRY_CHECK(sum_of(info.output_splits) == x.size(0), InvalidArgument, where(kSequence, group),
              ": output_splits ", list_str(info.output_splits), " add up to ",
              sum_of(info.output_splits), " ids but the input has ", x.size(0), " rows");
  PlanPtr plan = plan_of(x, info, group);
  if (group.size() == 1) {
    PlanSpares::give(std::move(plan));
    return NoWait<Variable>(x);
  }
  ferry::detail::ScopedSpare<std::vector<Variable>> inputs;  // the thread's list: none allocated
  inputs->push_back(x);
  return detail::run_comm_op_single(
      ferry::detail::make_pooled<AllToAllSequenceOp>(group, codecs, d, std::move(plan)), *inputs);
}

namespace {

// forward[j*T + t] = t*W + j; backward is its inverse, the same formula with T and W swapped.
Tensor sequence_recat(int64_t outer, int64_t inner, const char* name) {
  FERRY_CHECK(outer >= 0 && inner >= 0, InvalidArgument, name,
              ": needs local_features >= 0 and world_size >= 1");
  std::vector<int64_t> recat;
  for (int64_t j = 0; j < outer; ++j)
    for (int64_t t = 0; t < inner; ++t) recat.push_back(t * outer + j);
  return from_vector(recat);
}

}  // namespace

Tensor sequence_forward_recat(int64_t local_features, int world_size) {
  FERRY_CHECK(world_size >= 1, InvalidArgument,
              "sequence_forward_recat: world_size must be >= 1, given ", world_size);
  return sequence_recat(world_size, local_features, "sequence_forward_recat");
}

Tensor sequence_backward_recat(int64_t local_features, int world_size) {
  FERRY_CHECK(world_size >= 1, InvalidArgument,
              "sequence_backward_recat: world_size must be >= 1, given ", world_size);
  return sequence_recat(local_features, world_size, "sequence_backward_recat");
}

Awaitable<Variable>::Callback unbucketize_permute_callback(Tensor unbucketize_permute_tensor) {
  FERRY_CHECK(unbucketize_permute_tensor.defined() && is_integer(unbucketize_permute_tensor),
              InvalidArgument,
              "unbucketize_permute_callback: the permutation must be an int32 / int64 tensor");
  return [perm = std::move(unbucketize_permute_tensor)](Variable y) {
    return index_select(y, 0, perm);
  };
}

}  // namespace ferry::torchrec
