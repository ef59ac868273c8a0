// Every torchrec comm op through the distributed gradcheck (float64) at W = 1..4 with uneven
// sizes and zero-size blocks: with gradient division off, the backward must be the gradient of
// the sum objective sum_r L_r; on, exactly 1/W of it (the gradient of the mean objective). And
// the sync path (sync collectives) must give the same outputs and gradients, bit for bit, as
// the asynchronous one.
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/torchrec/torchrec.h>
#include "tests/torchrec/comm_test_helpers.h"
#include "tests/differentiable/spmd_gradcheck.h"

using namespace ferry;
using namespace ferry::torchrec;
using trtest::expect_equal;
using trtest::with_gradient_division;

using trtest::check_op;
using trtest::Fn;
using trtest::one;
using trtest::rank_input;

DG_CASE("torchrec gradcheck: alltoall_pooled, uneven batches and dims with zeros",
        "[torchrec][gradcheck][alltoall_pooled]", 1, 2, 3, 4) {
  std::vector<int64_t> batch, dims;
  for (int j = 0; j < g.size(); ++j) {
    batch.push_back((2 * j + 1) % 3);  // 1, 0, 2, 1
    dims.push_back((j + 2) % 3);       // 2, 0, 1, 2
  }
  int64_t rows = 0;
  for (int64_t b : batch) rows += b;
  const All2AllPooledInfo info(batch, dims);
  check_op(g, "alltoall_pooled",
           one([&](const Variable& x) { return alltoall_pooled(x, info, g); }),
           {rank_input({rows, dims[g.rank()]}, g)});
}

DG_CASE("torchrec gradcheck: variable_batch_alltoall_pooled, per-feature batches with zeros",
        "[torchrec][gradcheck][variable_batch]", 1, 2, 3, 4) {
  const int w = g.size(), me = g.rank();
  VariableBatchAll2AllPooledInfo info;
  for (int i = 0; i < w; ++i) {
    std::vector<int64_t> dims;
    for (int f = 0; f <= i % 2; ++f) dims.push_back(1 + (i + f) % 2);
    info.emb_dim_per_rank_per_feature.push_back(dims);
  }
  // Rank i needs (i + f + j) % 3 samples of rank j's feature f: each rank derives both its own
  // lists from the one formula, so they agree across ranks.
  int64_t elements = 0;
  for (int i = 0; i < w; ++i) {
    std::vector<int64_t> per_feature;
    for (size_t f = 0; f < info.emb_dim_per_rank_per_feature[me].size(); ++f) {
      per_feature.push_back((i + static_cast<int>(f) + me) % 3);
      elements += per_feature.back() * info.emb_dim_per_rank_per_feature[me][f];
    }
    info.batch_size_per_rank_per_feature.push_back(per_feature);
    for (size_t f = 0; f < info.emb_dim_per_rank_per_feature[i].size(); ++f)
      info.batch_size_per_feature_pre_a2a.push_back((me + static_cast<int>(f) + i) % 3);
  }
  check_op(g, "variable_batch_alltoall_pooled",
           one([&](const Variable& x) { return variable_batch_alltoall_pooled(x, info, g); }),
           {rank_input({elements}, g)});
}

DG_CASE("torchrec gradcheck: alltoall_sequence, recat with T = 0 on some ranks",
        "[torchrec][gradcheck][alltoall_sequence]", 1, 2, 3, 4) {
  const int w = g.size(), me = g.rank();
  const int64_t b = 2, d = 2;
  auto features = [](int r) { return static_cast<int64_t>((r + 1) % 3); };  // 1, 2, 0, 1
  // Ids of (owner r, feature t, source s, sample i).
  auto len = [](int r, int64_t t, int s, int64_t i) { return (r + 2 * t + 3 * s + i) % 3; };
  All2AllSequenceInfo info;
  info.embedding_dim = d;
  std::vector<int64_t> lengths;
  info.output_splits.assign(w, 0);
  info.input_splits.assign(w, 0);
  for (int64_t t = 0; t < features(me); ++t)
    for (int s = 0; s < w; ++s)
      for (int64_t i = 0; i < b; ++i) {
        lengths.push_back(len(me, t, s, i));
        info.output_splits[s] += len(me, t, s, i);
      }
  for (int j = 0; j < w; ++j)
    for (int64_t t = 0; t < features(j); ++t)
      for (int64_t i = 0; i < b; ++i) info.input_splits[j] += len(j, t, me, i);
  info.lengths_after_sparse_data_all2all = from_vector<int64_t>(lengths, {features(me), w * b});
  info.forward_recat_tensor = sequence_forward_recat(features(me), w);
  info.backward_recat_tensor = sequence_backward_recat(features(me), w);
  int64_t rows = 0;
  for (int64_t n : info.output_splits) rows += n;
  check_op(g, "alltoall_sequence",
           one([&](const Variable& x) { return alltoall_sequence(x, info, g); }),
           {rank_input({rows, d}, g)});

  // Variable batch: every length is a segment, here permuted in reverse order.
  All2AllSequenceInfo vb = info;
  vb.variable_batch_size = true;
  std::vector<int64_t> forward, backward(lengths.size());
  for (size_t q = 0; q < lengths.size(); ++q)
    forward.push_back(static_cast<int64_t>(lengths.size() - 1 - q));
  for (size_t q = 0; q < forward.size(); ++q) backward[forward[q]] = static_cast<int64_t>(q);
  vb.forward_recat_tensor = from_vector(forward);
  vb.backward_recat_tensor = from_vector(backward);
  // A permutation of segments that are not rank-major any more: only the local rows move, so
  // send the rows as the splits say (the values differ from the uniform case, the adjoint is
  // still exact).
  check_op(g, "alltoall_sequence (variable batch)",
           one([&](const Variable& x) { return alltoall_sequence(x, vb, g); }),
           {rank_input({rows, d}, g, 1)});
}

DG_CASE("torchrec gradcheck: alltoallv, uneven rows and tables", "[torchrec][gradcheck][alltoallv]",
        1, 2, 3, 4) {
  // Two tables per rank (the gradcheck wants the same input count everywhere), rank r's first
  // one 1 + r % 2 columns wide, its second one 1; 5 rows, which no W > 1 here divides.
  auto width = [](int r, int t) { return t == 0 ? 1 + r % 2 : 1; };
  std::vector<int64_t> out_split;
  for (int r = 0; r < g.size(); ++r) out_split.push_back(width(r, 0) + width(r, 1));
  std::vector<Tensor> inputs;
  for (int t = 0; t < 2; ++t) inputs.push_back(rank_input({5, width(g.rank(), t)}, g, t));
  check_op(g, "alltoallv",
           [&](const std::vector<Variable>& in) { return alltoallv(in, g, out_split).wait(); },
           inputs, /*async_divides=*/false);
}

DG_CASE("torchrec gradcheck: reduce_scatter_pooled, zero-size and unequal blocks",
        "[torchrec][gradcheck][reduce_scatter]", 1, 2, 3, 4) {
  std::vector<Tensor> inputs;
  for (int j = 0; j < g.size(); ++j) inputs.push_back(rank_input({j % 3, 2}, g, j));
  check_op(g, "reduce_scatter_pooled",
           [&](const std::vector<Variable>& in) {
             return std::vector<Variable>{reduce_scatter_pooled(in, g).wait()};
           },
           inputs);
}

DG_CASE("torchrec gradcheck: reduce_scatter_base_pooled and all_gather_base_pooled",
        "[torchrec][gradcheck][reduce_scatter][all_gather]", 1, 2, 3, 4) {
  // Few elements: the numeric pass runs the op twice per element, and the MPI suites run it
  // oversubscribed.
  for (int64_t m : {0, 2}) {
    check_op(g, "reduce_scatter_base_pooled",
             one([&](const Variable& x) { return reduce_scatter_base_pooled(x, g); }),
             {rank_input({g.size() * m, 1}, g)});
    check_op(g, "all_gather_base_pooled",
             one([&](const Variable& x) { return all_gather_base_pooled(x, g); }),
             {rank_input({m, 2}, g)});
  }
}

DG_CASE("torchrec gradcheck: reduce_scatter_v_pooled (unequal and equal) and per feature",
        "[torchrec][gradcheck][reduce_scatter]", 1, 2, 3, 4) {
  std::vector<int64_t> uneven, equal;
  for (int j = 0; j < g.size(); ++j) {
    uneven.push_back((2 * j + 1) % 3);  // 1, 0, 2, 1
    equal.push_back(1);
  }
  for (const auto& splits : {uneven, equal}) {
    int64_t rows = 0;
    for (int64_t s : splits) rows += s;
    check_op(g, "reduce_scatter_v_pooled",
             one([&](const Variable& x) { return reduce_scatter_v_pooled(x, splits, g); }),
             {rank_input({rows, 2}, g)});
  }
  const std::vector<int64_t> dims{2, 1};
  std::vector<std::vector<int64_t>> batches;
  int64_t n = 0;
  for (int r = 0; r < g.size(); ++r) {
    batches.push_back({r % 3, (r + 1) % 3});
    n += batches.back()[0] * dims[0] + batches.back()[1] * dims[1];
  }
  check_op(g, "reduce_scatter_v_per_feature_pooled",
           one([&](const Variable& x) {
             return reduce_scatter_v_per_feature_pooled(x, batches, dims, g);
           }),
           {rank_input({n}, g)});
}
