#include <ferry/collectives/towhee/towhee.h>

#include <ferry/collectives/collectives.h>
#include <ferry/collectives/differentiable/differentiable.h>
#include <ferry/collectives/differentiable/checks.h>
#include <ferry/runtime/error.h>

#include <sstream>

namespace ferry::towhee {

namespace {

// Every rank's (dims, batch rows, elements per row), exchanged so that a mismatch is seen by
// all ranks alike and every rank raises the same error before the gather: the raw all_gather
// does not compare sizes across ranks, and each rank only knows its own batch.
void check_same_batch_on_every_rank(const Variable& x, const Group& group, const char* op) {
  const int world = group.size();
  const Shape row_shape(x.shape().begin() + 1, x.shape().end());
  constexpr int kFields = 4;
  const Tensor mine = from_vector<int64_t>({x.dim(), x.size(0), shape_numel(row_shape),
                                            detail::shape_fingerprint(x.shape(), 0)});
  Tensor all = empty({kFields * static_cast<int64_t>(world)}, DType::Int64);
  ferry::all_gather(mine, all, group).wait();
  const int64_t* a = all.data<int64_t>();
  bool same = true;
  for (int k = 1; k < world; ++k) {
    for (int i = 0; i < kFields; ++i) same = same && a[kFields * k + i] == a[i];
  }
  if (same) return;
  std::ostringstream by_rank;
  for (int k = 0; k < world; ++k) {
    const int64_t* f = a + kFields * k;
    by_rank << (k == 0 ? "" : ", ") << "rank " << k << ": " << f[1] << " rows of " << f[2]
            << " elements (" << f[0] << "-d" << (f[3] == a[3] ? "" : ", another row shape")
            << ")";
  }
  by_rank << "; this rank's shape is " << shape_str(x.shape());
  FERRY_THROW(InvalidArgument, detail::where(op, group),
              ": every rank must have the same batch size and row shape (towhee slices the "
              "gradient at B*rank), given ", by_rank.str());
}

Variable gather(const Variable& x, const Group& group, Adjoint adjoint, const char* op) {
  detail::check_differentiable_input(x, group, op);
  detail::check_has_rows(x, group, op);
  if (group.size() > 1) check_same_batch_on_every_rank(x, group, op);
  // With equal batches B, the all_gather's blocks are towhee's rows [B*rank, B*(rank+1)), and
  // its own-block selection uses the group rank (never a node-local one).
  return ferry::all_gather(x, group, adjoint);
}

}  // namespace

Variable all_gather(const Variable& x, const Group& group) {
  return gather(x, group, Adjoint::Replicated, "towhee::all_gather");
}

Variable all_gather2(const Variable& x, const Group& group) {
  return gather(x, group, Adjoint::PerRank, "towhee::all_gather2");
}

}  // namespace ferry::towhee
