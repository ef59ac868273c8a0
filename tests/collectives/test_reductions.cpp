// Reductions: all_reduce (in place, out of place, output == input), reduce to every root,
// reduce_scatter, reduce_scatter_v (uneven and zero sizes), integer wrap-around.
//
// Coverage and sampling:
//   * small: every dtype x world size {1, 2, 3, 4, 7, 8} x shapes [0], [1], [37] and [5, 3]
//     x every reduce op valid for the dtype (Avg only for floating) x every variant.
//   * >= 1M elements (1 << 20): world sizes {2, 3, 8}, float32 plus one other dtype per
//     collective (all_reduce: bfloat16, reduce: int32, reduce_scatter: float16,
//     reduce_scatter_v: int64), with Sum, Max and (floating) Avg.
// References are computed in double from the same generators (test_helpers.h); the values are
// small integers so every result except Avg must match exactly.
#include "checks.h"
#include "spmd_case.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <limits>

using namespace ftest;

namespace {

struct SmallShape {
  int64_t rows;
  int64_t inner;
};
constexpr SmallShape kSmallShapes[] = {{0, 0}, {1, 0}, {37, 0}, {5, 3}};

OpCase make_case(DType dt, int64_t rows, int64_t inner, ReduceOp op, int variant = 0,
                 int root = 0, uint64_t salt = 0) {
  OpCase c;
  c.dtype = dt;
  c.rows = rows;
  c.inner = inner;
  c.op = op;
  c.variant = variant;
  c.root = root;
  c.salt = salt;
  return c;
}

bool floating(DType dt) {
  return dt == DType::Float32 || dt == DType::Float64 || dt == DType::Float16 ||
         dt == DType::BFloat16;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

FT_SPMD_CASE("all_reduce: every op; dtype; world size and small shape", "[reductions][all_reduce]", 1, 2, 3, 4, 7, 8) {
  for (DType dt : ferry::kAllDTypes)
    for (ReduceOp op : ops_for(dt))
      for (const SmallShape& s : kSmallShapes)
        for (int variant : {0, 1, 2})
          run_case(ctx, g, start_all_reduce, make_case(dt, s.rows, s.inner, op, variant));
}

FT_SPMD_CASE("all_reduce: 1M elements", "[reductions][all_reduce][large]", 2, 3, 8) {
  for (DType dt : {DType::Float32, DType::BFloat16}) {
      run_case(ctx, g, start_all_reduce, make_case(dt, kLarge, 0, ReduceOp::Sum, 0));
      run_case(ctx, g, start_all_reduce, make_case(dt, kLarge, 0, ReduceOp::Max, 1));
      run_case(ctx, g, start_all_reduce, make_case(dt, kLarge, 0, ReduceOp::Avg, 2));
  }
}

FT_SPMD_CASE("all_reduce: integer sums wrap around", "[reductions][all_reduce]", 2, 3, 4) {
  const uint64_t W = static_cast<uint64_t>(g.size());
  {
    Tensor t = ferry::full({3}, 200.0, DType::UInt8);
    ferry::all_reduce(t, g).wait();
    const double want = static_cast<double>(static_cast<uint8_t>(200u * W));
    ctx.expect_tensor(where(g, "uint8 200 * W"), t, DType::UInt8, {3}, {want, want, want});
  }
  {
    Tensor t = ferry::from_vector<int32_t>({int32_t{1} << 30, 7});
    ferry::all_reduce(t, g).wait();
    const auto want = static_cast<int32_t>(static_cast<uint32_t>((uint64_t{1} << 30) * W));
    ctx.expect_tensor(where(g, "int32 2^30 * W"), t, DType::Int32, {2},
                      {static_cast<double>(want), 7.0 * static_cast<double>(W)});
  }
  {
    Tensor t = ferry::from_vector<int64_t>({int64_t{1} << 62});
    ferry::all_reduce(t, g).wait();
    const auto want = static_cast<int64_t>((uint64_t{1} << 62) * W);
    const std::vector<int64_t> got = t.to_vector<int64_t>();
    FT_CHECK(ctx, got.size() == 1 && got[0] == want, where(g, "int64 2^62 * W wraps"));
  }
}

FT_SPMD_CASE("reduce: to every root", "[reductions][reduce]", 1, 2, 3, 4, 7, 8) {
  for (int root = 0; root < g.size(); ++root)
    for (DType dt : ferry::kAllDTypes)
      for (const SmallShape& s : kSmallShapes) {
        // Sum on every root (non-root output alternately undefined and a filled tensor
        // that must stay untouched); the other ops on the last root.
        run_case(ctx, g, start_reduce, make_case(dt, s.rows, s.inner, ReduceOp::Sum, root % 2, root));
        if (root != g.size() - 1) continue;
        for (ReduceOp op : ops_for(dt))
          if (op != ReduceOp::Sum)
            run_case(ctx, g, start_reduce, make_case(dt, s.rows, s.inner, op, 1, root));
      }
}

FT_SPMD_CASE("reduce: 1M elements", "[reductions][reduce][large]", 2, 3, 8) {
  for (DType dt : {DType::Float32, DType::Int32}) {
      run_case(ctx, g, start_reduce, make_case(dt, kLarge, 0, ReduceOp::Sum, 0, 0));
      run_case(ctx, g, start_reduce, make_case(dt, kLarge, 0, ReduceOp::Max, 1, g.size() - 1));
  }
}

FT_SPMD_CASE("reduce_scatter: every op; dtype; world size and small block", "[reductions][reduce_scatter]", 1, 2, 3, 4, 7, 8) {
  for (DType dt : ferry::kAllDTypes)
    for (ReduceOp op : ops_for(dt))
      for (const SmallShape& s : kSmallShapes)
        for (int variant : {0, 1})  // 1: output is the caller's block of input
          run_case(ctx, g, start_reduce_scatter, make_case(dt, s.rows, s.inner, op, variant));
}

FT_SPMD_CASE("reduce_scatter: 1M-element input", "[reductions][reduce_scatter][large]", 2, 3, 8) {
  for (DType dt : {DType::Float32, DType::Float16}) {
      const int64_t rows = ceil_div(kLarge, g.size());  // input [W * rows] >= 1M elements
      run_case(ctx, g, start_reduce_scatter, make_case(dt, rows, 0, ReduceOp::Sum, 0));
      run_case(ctx, g, start_reduce_scatter, make_case(dt, rows, 0, ReduceOp::Max, 1));
      run_case(ctx, g, start_reduce_scatter, make_case(dt, rows, 0, ReduceOp::Avg, 0));
  }
}

FT_SPMD_CASE("reduce_scatter_v: uneven and zero sizes", "[reductions][reduce_scatter_v]", 1, 2, 3, 4, 7, 8) {
  for (DType dt : ferry::kAllDTypes)
    for (ReduceOp op : ops_for(dt))
      for (const SmallShape& s : kSmallShapes)
        for (uint64_t salt : {0u, 1u, 2u})  // moves the zero-size ranks around
          for (int variant : {0, 1})        // 1: reduce_scatter's list form, blocks apart
            run_case(ctx, g, start_reduce_scatter_v,
                     make_case(dt, s.rows, s.inner, op, variant, 0, salt));
}

TEST_CASE("reduce_scatter_v: sizes check", "[reductions][reduce_scatter_v]") {
  // The reference's sizes really are uneven and contain zeros (so the test means something).
  const std::vector<int64_t> sizes = uneven_sizes(8, 37, 0);
  CHECK(std::count(sizes.begin(), sizes.end(), 0) >= 2);
  CHECK(*std::max_element(sizes.begin(), sizes.end()) > 37);
  CHECK(uneven_sizes(3, 0, 1) == std::vector<int64_t>{0, 0, 0});
}

FT_SPMD_CASE("reduce_scatter_v: about 1.3M-element input", "[reductions][reduce_scatter_v][large]", 2, 3, 8) {
  for (DType dt : {DType::Float32, DType::Int64}) {
      // uneven_sizes gives about 2/3 of the ranks rows + [0, 5): sum ~ 1.33M for rows = 2M / W.
      const int64_t rows = 2 * kLarge / g.size();
      run_case(ctx, g, start_reduce_scatter_v, make_case(dt, rows, 0, ReduceOp::Sum, 0, 0, 0));
      run_case(ctx, g, start_reduce_scatter_v,
               make_case(dt, rows, 0, floating(dt) ? ReduceOp::Avg : ReduceOp::Min, 0, 0, 2));
      run_case(ctx, g, start_reduce_scatter_v, make_case(dt, rows, 0, ReduceOp::Sum, 1, 0, 1));
  }
}
