#include "random_reference.h"

#include <algorithm>
#include <numeric>
#include <sstream>

namespace rdtest {

using ferry::Adjoint;
using ferry::ReduceOp;
using ferry::Shape;

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::AllReduce: return "all_reduce";
    case Kind::Replicate: return "replicate";
    case Kind::AllGather: return "all_gather";
    case Kind::AllGatherV: return "all_gather_v";
    case Kind::ReduceScatter: return "reduce_scatter";
    case Kind::ReduceScatterV: return "reduce_scatter_v";
    case Kind::AllToAll: return "all_to_all_single";
    case Kind::AllToAllSplit: return "all_to_all_single (splits)";
    case Kind::AllToAllAsync: return "all_to_all_single_async (splits)";
    case Kind::Broadcast: return "broadcast";
    case Kind::Scatter: return "scatter";
    case Kind::Gather: return "gather";
  }
  return "?";
}

namespace {

std::string list(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

int64_t sum(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }
// The sum of the first n entries of v.
int64_t prefix(const std::vector<int64_t>& v, int n) {
  return std::accumulate(v.begin(), v.begin() + n, int64_t{0});
}

Shape rows_of(const Case& c, int64_t rows) {
  Shape s{rows};
  s.insert(s.end(), c.trailing.begin(), c.trailing.end());
  return s;
}

int64_t row_elems(const Case& c) { return ferry::shape_numel(c.trailing); }

Values zeros_of(const Shape& shape) {
  return Values{shape, std::vector<double>(static_cast<size_t>(ferry::shape_numel(shape)), 0.0)};
}

// Rows [first, first + count) of `x`, appended to `out`.
void append_rows(const Case& c, const Values& x, int64_t first, int64_t count,
                 std::vector<double>& out) {
  const int64_t e = row_elems(c);
  out.insert(out.end(), x.v.begin() + first * e, x.v.begin() + (first + count) * e);
}

// Adds `src` (count rows) into rows [first, first + count) of `dst`.
void add_rows(const Case& c, Values& dst, int64_t first, const double* src, int64_t count) {
  const int64_t e = row_elems(c);
  for (int64_t i = 0; i < count * e; ++i) dst.v[static_cast<size_t>(first * e + i)] += src[i];
}

// Where rank k's rows to rank j start in its input (split lists).
int64_t send_offset(const Case& c, int k, int j) {
  int64_t o = 0;
  for (int jj = 0; jj < j; ++jj) o += c.splits[k][jj];
  return o;
}
// Where the rows from rank k start in rank j's output.
int64_t recv_offset(const Case& c, int j, int k) {
  int64_t o = 0;
  for (int kk = 0; kk < k; ++kk) o += c.splits[kk][j];
  return o;
}

}  // namespace

std::string Case::describe() const {
  std::ostringstream os;
  os << kind_name(kind) << " world " << world << " " << ferry::dtype_name(dtype);
  if (kind == Kind::AllReduce) os << " " << ferry::reduce_op_name(op);
  if (kind == Kind::AllReduce || kind == Kind::AllGather || kind == Kind::AllGatherV ||
      kind == Kind::Broadcast)
    os << " adjoint " << ferry::adjoint_name(adjoint);
  if (kind == Kind::Broadcast || kind == Kind::Scatter || kind == Kind::Gather)
    os << " root " << root;
  os << (scalar ? " 0-d" : " m " + std::to_string(m)) << " trailing "
     << ferry::shape_str(trailing);
  if (!rows.empty()) os << " rows/sizes " << list(rows);
  if (!splits.empty()) {
    os << " splits";
    for (const auto& s : splits) os << " " << list(s);
  }
  return os.str();
}

Shape input_shape(const Case& c, int rank) {
  const int64_t W = c.world;
  switch (c.kind) {
    case Kind::AllReduce:
    case Kind::Replicate:
    case Kind::Broadcast:
      return c.scalar ? Shape{} : rows_of(c, c.m);
    case Kind::AllGather:
    case Kind::Gather:
      return rows_of(c, c.m);
    case Kind::AllGatherV: return rows_of(c, c.rows[rank]);
    case Kind::ReduceScatter:
    case Kind::AllToAll:
      return rows_of(c, W * c.m);
    case Kind::ReduceScatterV: return rows_of(c, sum(c.rows));
    case Kind::AllToAllSplit:
    case Kind::AllToAllAsync:
      return rows_of(c, sum(c.splits[rank]));
    case Kind::Scatter: return rows_of(c, rank == c.root ? W * c.m : c.m);
  }
  return {};
}

Shape output_shape(const Case& c, int rank) {
  const int64_t W = c.world;
  switch (c.kind) {
    case Kind::AllReduce:
    case Kind::Replicate:
    case Kind::Broadcast:
    case Kind::AllToAll:
      return input_shape(c, rank);
    case Kind::AllGather: return rows_of(c, W * c.m);
    case Kind::AllGatherV: return rows_of(c, sum(c.rows));
    case Kind::ReduceScatter:
    case Kind::Scatter:
      return rows_of(c, c.m);
    case Kind::ReduceScatterV: return rows_of(c, c.rows[rank]);
    case Kind::AllToAllSplit:
    case Kind::AllToAllAsync: {
      int64_t n = 0;
      for (int k = 0; k < c.world; ++k) n += c.splits[k][rank];
      return rows_of(c, n);
    }
    case Kind::Gather: return rows_of(c, rank == c.root ? W * c.m : 0);
  }
  return {};
}

std::vector<Values> reference_forward(const Case& c, const std::vector<Values>& x) {
  const int W = c.world;
  std::vector<Values> y;
  for (int r = 0; r < W; ++r) y.push_back(Values{output_shape(c, r), {}});
  switch (c.kind) {
    case Kind::AllReduce: {
      std::vector<double> acc = x[0].v;
      for (int k = 1; k < W; ++k)
        for (size_t i = 0; i < acc.size(); ++i) {
          const double v = x[k].v[i];
          acc[i] = c.op == ReduceOp::Max ? std::max(acc[i], v)
                   : c.op == ReduceOp::Min ? std::min(acc[i], v)
                                           : acc[i] + v;
        }
      if (c.op == ReduceOp::Avg)
        for (double& a : acc) a /= W;
      for (int r = 0; r < W; ++r) y[r].v = acc;
      break;
    }
    case Kind::Replicate:
      for (int r = 0; r < W; ++r) y[r].v = x[r].v;
      break;
    case Kind::AllGather:
    case Kind::AllGatherV:
      for (int r = 0; r < W; ++r)
        for (int k = 0; k < W; ++k) y[r].v.insert(y[r].v.end(), x[k].v.begin(), x[k].v.end());
      break;
    case Kind::ReduceScatter:
    case Kind::ReduceScatterV:
      for (int r = 0; r < W; ++r) {
        const int64_t first = c.kind == Kind::ReduceScatter
                                  ? r * c.m
                                  : prefix(c.rows, r);
        const int64_t count = c.kind == Kind::ReduceScatter ? c.m : c.rows[r];
        y[r] = zeros_of(y[r].shape);
        for (int k = 0; k < W; ++k) {
          std::vector<double> block;
          append_rows(c, x[k], first, count, block);
          add_rows(c, y[r], 0, block.data(), count);
        }
      }
      break;
    case Kind::AllToAll:
      for (int r = 0; r < W; ++r)
        for (int k = 0; k < W; ++k) append_rows(c, x[k], r * c.m, c.m, y[r].v);
      break;
    case Kind::AllToAllSplit:
    case Kind::AllToAllAsync:
      for (int r = 0; r < W; ++r)
        for (int k = 0; k < W; ++k) append_rows(c, x[k], send_offset(c, k, r), c.splits[k][r], y[r].v);
      break;
    case Kind::Broadcast:
      for (int r = 0; r < W; ++r) y[r].v = x[c.root].v;
      break;
    case Kind::Scatter:
      for (int r = 0; r < W; ++r) append_rows(c, x[c.root], r * c.m, c.m, y[r].v);
      break;
    case Kind::Gather:
      for (int k = 0; k < W; ++k)
        y[c.root].v.insert(y[c.root].v.end(), x[k].v.begin(), x[k].v.end());
      break;
  }
  return y;
}

std::vector<Values> reference_backward(const Case& c, const std::vector<Values>& x,
                                       const std::vector<Values>& g) {
  const int W = c.world;
  const bool replicated = c.adjoint == Adjoint::Replicated;
  std::vector<Values> dx;
  for (int k = 0; k < W; ++k) dx.push_back(zeros_of(input_shape(c, k)));
  // sum_r G_r, for the elementwise ops.
  std::vector<double> g_sum(g[0].v.size(), 0.0);
  if (c.kind == Kind::AllReduce || c.kind == Kind::Replicate || c.kind == Kind::Broadcast)
    for (int r = 0; r < W; ++r)
      for (size_t i = 0; i < g_sum.size(); ++i) g_sum[i] += g[r].v[i];
  switch (c.kind) {
    case Kind::AllReduce:
      for (int k = 0; k < W; ++k)
        for (size_t i = 0; i < dx[k].v.size(); ++i) {
          double grad = replicated ? g[k].v[i] : g_sum[i];
          if (c.op == ReduceOp::Avg) grad /= W;
          if (c.op == ReduceOp::Max || c.op == ReduceOp::Min) {
            // The lowest rank holding the extreme takes all of it.
            int winner = 0;
            for (int j = 1; j < W; ++j) {
              const double a = x[j].v[i], b = x[winner].v[i];
              if (c.op == ReduceOp::Max ? a > b : a < b) winner = j;
            }
            if (winner != k) grad = 0.0;
          }
          dx[k].v[i] = grad;
        }
      break;
    case Kind::Replicate:
      for (int k = 0; k < W; ++k) dx[k].v = g_sum;
      break;
    case Kind::AllGather:
    case Kind::AllGatherV:
      for (int k = 0; k < W; ++k) {
        const int64_t first = c.kind == Kind::AllGather ? k * c.m
                                                        : prefix(c.rows, k);
        const int64_t count = x[k].shape[0];
        for (int r = 0; r < W; ++r) {
          if (replicated && r != k) continue;
          std::vector<double> block;
          append_rows(c, g[r], first, count, block);
          add_rows(c, dx[k], 0, block.data(), count);
        }
      }
      break;
    case Kind::ReduceScatter:
    case Kind::ReduceScatterV:
      for (int k = 0; k < W; ++k) {
        dx[k].v.clear();
        for (int j = 0; j < W; ++j) dx[k].v.insert(dx[k].v.end(), g[j].v.begin(), g[j].v.end());
      }
      break;
    case Kind::AllToAll:
      for (int k = 0; k < W; ++k) {
        dx[k].v.clear();
        for (int j = 0; j < W; ++j) append_rows(c, g[j], k * c.m, c.m, dx[k].v);
      }
      break;
    case Kind::AllToAllSplit:
    case Kind::AllToAllAsync:
      for (int k = 0; k < W; ++k) {
        dx[k].v.clear();
        for (int j = 0; j < W; ++j) append_rows(c, g[j], recv_offset(c, j, k), c.splits[k][j], dx[k].v);
      }
      break;
    case Kind::Broadcast:
      dx[c.root].v = replicated ? g[c.root].v : g_sum;
      break;
    case Kind::Scatter:
      dx[c.root].v.clear();
      for (int k = 0; k < W; ++k)
        dx[c.root].v.insert(dx[c.root].v.end(), g[k].v.begin(), g[k].v.end());
      break;
    case Kind::Gather:
      for (int k = 0; k < W; ++k) {
        dx[k].v.clear();
        append_rows(c, g[c.root], k * c.m, c.m, dx[k].v);
      }
      break;
  }
  return dx;
}

}  // namespace rdtest
