// alltoall_sequence (torchrec comm_ops): per-id embeddings back to the ranks that own the samples,
// and the recat helpers of SequenceEmbeddingsAllToAll.
#include <ferry/autograd/ops.h>
#include <ferry/collectives/torchrec/comm/alltoall_op.h>
#include <ferry/collectives/torchrec/comm/comm_ops.h>
#include <ferry/runtime/error.h>

#include <algorithm>

namespace ferry::torchrec {
namespace {

using detail::list_str;
using detail::sum_of;
using detail::where;

constexpr const char* kSequence = "alltoall_sequence";

// An int32 / int64 tensor's values (typed reads: get_flat's per-element conversion cost more
// than the op's data movement at a few thousand ids).
std::vector<int64_t> integers_of(const Tensor& t) {
  if (t.dtype() == DType::Int64) return t.to_vector<int64_t>();
  const std::vector<int32_t> narrow = t.to_vector<int32_t>();
  return std::vector<int64_t>(narrow.begin(), narrow.end());
}

bool is_integer(const Tensor& t) {
  return t.dtype() == DType::Int32 || t.dtype() == DType::Int64;
}

// Rows of `rows` ([N, D], flat) in segment order recat[0], recat[1], ...: output segment q is
// input segment recat[q], whose row count is segment_rows[recat[q]] (fbgemm's permute_2D /
// permute_1D_sparse_data on values of D elements per id).
Tensor permute_segments(const Tensor& rows, int64_t d, const std::vector<int64_t>& recat,
                        const std::vector<int64_t>& segment_rows) {
  std::vector<int64_t> start(segment_rows.size() + 1, 0);
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

// The permutation forward and its inverse backward, over segments of known row counts.
struct SegmentPermutation {
  std::vector<int64_t> forward_recat, backward_recat;
  std::vector<int64_t> segment_rows;           // before the forward permutation
  std::vector<int64_t> permuted_segment_rows;  // after it (torchrec's permuted lengths)
};

class AllToAllSequenceOp final : public detail::AllToAllCommOp {
 public:
  AllToAllSequenceOp(Group group, const Codecs& codecs, int64_t dim,
                     std::optional<SegmentPermutation> permutation, std::vector<int64_t> send,
                     std::vector<int64_t> recv)
      : AllToAllCommOp(kSequence, std::move(group), codecs, detail::Division::kTorchrec,
                       std::move(send), std::move(recv)),
        dim_(dim),
        permutation_(std::move(permutation)) {}

 protected:
  Tensor forward_send(const std::vector<Tensor>& inputs) override {
    if (!permutation_) return inputs[0];
    return permute_segments(inputs[0], dim_, permutation_->forward_recat,
                            permutation_->segment_rows);
  }
  // With a permutation and no codec, the segments are sent from where they lie in the input,
  // in recat order, and backward writes their gradients back there: no permuted copy. Without
  // one the blocks are plain runs, but still a Placement: whether a rank has a permutation
  // depends on its own features, and every rank of an exchange must use the same form (MPI
  // runs the laid-out one as a different collective).
  std::shared_ptr<const Placement> placement(const std::vector<Tensor>&) override {
    if (dim_ == 0) return nullptr;  // the same on every rank: the embedding dim
    if (!permutation_)
      return std::make_shared<const Placement>(Placement{
          contiguous(sends()), contiguous(receives()), {sum_of(receives()) / dim_, dim_}});
    const std::vector<int64_t>& rows = permutation_->segment_rows;
    std::vector<int64_t> start(rows.size() + 1, 0);
    for (size_t s = 0; s < rows.size(); ++s) start[s + 1] = start[s] + rows[s] * dim_;
    Placement p;
    p.send.resize(sends().size());
    size_t block = 0;
    int64_t room = sends().empty() ? 0 : sends()[0];  // elements block `block` still takes
    for (int64_t s : permutation_->forward_recat) {
      int64_t at = start[s], left = rows[s] * dim_;
      while (left > 0) {  // a segment may straddle two ranks' blocks
        while (room == 0) room = sends()[++block];
        const int64_t n = std::min(left, room);
        p.send[block].push_back(StridedRun{at, 1, n, 0});
        at += n;
        left -= n;
        room -= n;
      }
    }
    p.recv = contiguous(receives());
    p.output_shape = {sum_of(receives()) / dim_, dim_};
    return std::make_shared<const Placement>(std::move(p));
  }
  std::vector<Tensor> forward_outputs(const Tensor& received) override {
    return detail::one_tensor(received.reshape({-1, dim_}));
  }
  Tensor gradient_send(const std::vector<Tensor>& grad_outputs, bool) override {
    return grad_outputs[0];
  }
  std::vector<Tensor> input_gradients(const Tensor& received) override {
    Tensor rows = received.reshape({-1, dim_});
    if (!permutation_) return detail::one_tensor(rows);
    return detail::one_tensor(permute_segments(rows, dim_, permutation_->backward_recat,
                                               permutation_->permuted_segment_rows));
  }

 private:
  int64_t dim_;
  std::optional<SegmentPermutation> permutation_;
};

// recat as a list, checked to be a permutation of 0..n-1.
std::vector<int64_t> permutation_of(const Tensor& recat, const char* name, int64_t n,
                                    const Group& group) {
  FERRY_CHECK(is_integer(recat), InvalidArgument, where(kSequence, group), ": ", name,
              " must be int32 or int64, given ", dtype_name(recat.dtype()));
  std::vector<int64_t> p = integers_of(recat);
  FERRY_CHECK(static_cast<int64_t>(p.size()) == n, InvalidArgument, where(kSequence, group),
              ": ", name, " has ", p.size(), " entries, forward_recat_tensor ", n);
  std::vector<bool> seen(p.size(), false);
  for (int64_t s : p) {
    FERRY_CHECK(s >= 0 && s < n && !seen[s], InvalidArgument, where(kSequence, group), ": ",
                name, " must be a permutation of 0..", n - 1, ", given ", list_str(p));
    seen[s] = true;
  }
  return p;
}

// `len`: lengths_after_sparse_data_all2all's values (read once by the caller).
SegmentPermutation segment_permutation(const All2AllSequenceInfo& info,
                                       const std::vector<int64_t>& len, int64_t rows,
                                       const Group& group) {
  const int64_t n = info.forward_recat_tensor.numel();
  SegmentPermutation p;
  p.forward_recat = permutation_of(info.forward_recat_tensor, "forward_recat_tensor", n, group);
  FERRY_CHECK(info.backward_recat_tensor.defined(), InvalidArgument, where(kSequence, group),
              ": forward_recat_tensor is given but backward_recat_tensor is not");
  p.backward_recat = permutation_of(info.backward_recat_tensor, "backward_recat_tensor", n, group);
  for (int64_t q = 0; q < n; ++q) {
    FERRY_CHECK(p.backward_recat[p.forward_recat[q]] == q, InvalidArgument,
                where(kSequence, group), ": backward_recat_tensor ", list_str(p.backward_recat),
                " is not the inverse of forward_recat_tensor ", list_str(p.forward_recat),
                " (the backward would not be the forward's transpose)");
  }
  if (info.variable_batch_size) {
    FERRY_CHECK(static_cast<int64_t>(len.size()) == n, InvalidArgument, where(kSequence, group),
                ": with variable_batch_size every length is a segment, so the recat needs ",
                len.size(), " entries, given ", n);
    p.segment_rows = len;
  } else {
    FERRY_CHECK(static_cast<int64_t>(len.size()) % n == 0, InvalidArgument,
                where(kSequence, group), ": lengths_after_sparse_data_all2all has ", len.size(),
                " entries, not a multiple of the ", n, " segments of forward_recat_tensor");
    const int64_t per = static_cast<int64_t>(len.size()) / n;
    p.segment_rows.assign(n, 0);
    for (int64_t s = 0; s < n; ++s)
      for (int64_t b = 0; b < per; ++b) p.segment_rows[s] += len[s * per + b];
  }
  FERRY_CHECK(sum_of(p.segment_rows) == rows, InvalidArgument, where(kSequence, group),
              ": lengths_after_sparse_data_all2all adds up to ", sum_of(p.segment_rows),
              " ids but the input has ", rows, " rows");
  p.permuted_segment_rows.reserve(static_cast<size_t>(n));
  for (int64_t q = 0; q < n; ++q)
    p.permuted_segment_rows.push_back(p.segment_rows[p.forward_recat[q]]);
  return p;
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
  const Tensor& lengths = info.lengths_after_sparse_data_all2all;
  std::vector<int64_t> len;
  if (lengths.defined()) {
    FERRY_CHECK(is_integer(lengths), InvalidArgument, where(kSequence, group),
                ": lengths_after_sparse_data_all2all must be int32 or int64, given ",
                dtype_name(lengths.dtype()));
    len = integers_of(lengths);
    detail::check_non_negative(len, "lengths_after_sparse_data_all2all", group, kSequence);
  }
  std::optional<SegmentPermutation> permutation;
  if (info.forward_recat_tensor.defined() && info.forward_recat_tensor.numel() > 0) {
    FERRY_CHECK(lengths.defined(), InvalidArgument, where(kSequence, group),
                ": forward_recat_tensor needs lengths_after_sparse_data_all2all");
    permutation = segment_permutation(info, len, x.size(0), group);
  }
  if (group.size() == 1) return NoWait<Variable>(x);
  std::vector<int64_t> send, recv;
  send.reserve(info.output_splits.size());
  recv.reserve(info.input_splits.size());
  for (int i = 0; i < group.size(); ++i) {
    send.push_back(info.output_splits[i] * d);
    recv.push_back(info.input_splits[i] * d);
  }
  return detail::run_comm_op_single(
      std::make_shared<AllToAllSequenceOp>(group, codecs, d, std::move(permutation),
                                           std::move(send), std::move(recv)),
      {x});
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
