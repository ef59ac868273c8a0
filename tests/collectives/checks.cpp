#include "checks.h"

#include <sstream>
#include <thread>

namespace ftest {

namespace {

// Data a rank must never see in an output: it marks outputs not (or not fully) written.
Gen sentinel(const OpCase& c, int rank) { return Gen(Pattern::Move, c.dtype, rank + 1000, c.salt + 7777); }
Gen moving(const OpCase& c, int rank) { return Gen(Pattern::Move, c.dtype, rank, c.salt); }

// An output's content before the op: generated data for small tensors; for large ones a
// constant (77, exact in every dtype), since generating it would dominate the suite's time.
Tensor make_sentinel(const OpCase& c, int rank, const Shape& shape, int64_t offset = 0) {
  Tensor t = ferry::empty(shape, c.dtype);
  if (t.numel() <= (int64_t{1} << 16)) {
    fill_from(t, sentinel(c, rank), offset);
  } else {
    fill_constant(t, 77.0);
  }
  return t;
}

// Memo keys: a pure function of what the reference depends on.
std::string key(const char* what, const OpCase& c, int world, int64_t n) {
  std::ostringstream os;
  os << what << '|' << static_cast<int>(c.dtype) << '|' << static_cast<int>(c.op) << '|' << world
     << '|' << n << '|' << c.salt << '|' << c.rows << '|' << c.inner;
  return os.str();
}

std::vector<double> slice(const std::vector<double>& v, int64_t offset, int64_t n) {
  return {v.begin() + offset, v.begin() + offset + n};
}

// Concatenation over ranks k of Gen moving(k) values [offsets[k], offsets[k] + counts[k]).
std::vector<double> concat_ranks(const OpCase& c, const std::vector<int64_t>& offsets,
                                 const std::vector<int64_t>& counts) {
  std::vector<double> out;
  for (size_t k = 0; k < counts.size(); ++k) {
    const std::vector<double> part = gen_values(moving(c, static_cast<int>(k)), offsets[k], counts[k]);
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

std::vector<int64_t> prefix(const std::vector<int64_t>& sizes) {  // exclusive prefix sums
  std::vector<int64_t> out(sizes.size(), 0);
  for (size_t i = 1; i < sizes.size(); ++i) out[i] = out[i - 1] + sizes[i - 1];
  return out;
}

}  // namespace

std::string OpCase::describe(const std::string& name) const {
  std::ostringstream os;
  os << name << " " << ferry::dtype_name(dtype) << " rows " << rows << " inner " << inner << " op "
     << ferry::reduce_op_name(op) << " root " << root << " variant " << variant << " salt " << salt;
  return os.str();
}

void finish(Ctx& ctx, Pending& p) {
  try {
    for (Work& w : p.works) w.wait();
  } catch (const std::exception& e) {
    ctx.fail(p.where + ": wait threw " + error_kind(e) + ": " + e.what());
    throw;
  }
  p.verify();
}

void run_case(Ctx& ctx, const Group& g, Starter start, const OpCase& c) {
  Pending p;
  try {
    p = start(ctx, g, c);
  } catch (const std::exception& e) {
    ctx.fail(where(g, c.describe("start")) + ": the call threw " + error_kind(e) + ": " + e.what());
    throw;
  }
  finish(ctx, p);
}

Pending start_all_reduce(Ctx& ctx, const Group& g, const OpCase& c) {
  const int W = g.size(), me = g.rank();
  const Shape shape = shape_of(c.rows, c.inner);
  const int64_t n = c.rows * row_numel(c.inner);
  const Gen gen(pattern_for(c.op), c.dtype, me, c.salt);
  Tensor in = make_tensor(gen, shape, c.dtype);
  Tensor out = in;
  const Tensor in0 = c.variant == 1 ? snapshot(in) : Tensor();
  Pending p{where(g, c.describe("all_reduce")), {}, {}};
  if (c.variant == 0) {
    p.works.push_back(ferry::all_reduce(in, g, c.op));
  } else if (c.variant == 1) {
    out = make_sentinel(c, me, shape);
    p.works.push_back(ferry::all_reduce(in, out, g, c.op));
  } else {
    p.works.push_back(ferry::all_reduce(in, in, g, c.op));
  }
  p.verify = [&ctx, c, W, n, shape, in, in0, out, w = p.where] {
    const auto& ref = ctx.shared(key("all_reduce", c, W, n),
                                 [&] { return reduce_reference(c.dtype, c.op, W, 0, n, c.salt); });
    ctx.expect_tensor(w, out, c.dtype, shape, ref, rtol_for(c.dtype, c.op));
    if (c.variant == 1) ctx.expect_unchanged(w + " (input must be unchanged)", in, in0);
  };
  return p;
}

Pending start_reduce(Ctx& ctx, const Group& g, const OpCase& c) {
  const int W = g.size(), me = g.rank();
  const Shape shape = shape_of(c.rows, c.inner);
  const int64_t n = c.rows * row_numel(c.inner);
  const Gen gen(pattern_for(c.op), c.dtype, me, c.salt);
  Tensor in = make_tensor(gen, shape, c.dtype);
  Tensor out;
  if (me == c.root || c.variant == 1) out = make_sentinel(c, me, shape);
  const Tensor in0 = snapshot(in), out0 = out.defined() ? snapshot(out) : Tensor();
  Pending p{where(g, c.describe("reduce")), {}, {}};
  p.works.push_back(ferry::reduce(in, out, c.root, g, c.op));
  p.verify = [&ctx, c, W, n, me, shape, in, in0, out, out0, w = p.where] {
    ctx.expect_unchanged(w + " (input must be unchanged)", in, in0);
    if (me == c.root) {
      const auto& ref = ctx.shared(key("reduce", c, W, n),
                                   [&] { return reduce_reference(c.dtype, c.op, W, 0, n, c.salt); });
      ctx.expect_tensor(w, out, c.dtype, shape, ref, rtol_for(c.dtype, c.op));
    } else if (out.defined()) {
      ctx.expect_unchanged(w + " (non-root output must be untouched)", out, out0);
    }
  };
  return p;
}

Pending start_reduce_scatter(Ctx& ctx, const Group& g, const OpCase& c) {
  const int W = g.size(), me = g.rank();
  const int64_t ie = row_numel(c.inner), m = c.rows;
  const Shape in_shape = shape_of(W * m, c.inner), out_shape = shape_of(m, c.inner);
  const Gen gen(pattern_for(c.op), c.dtype, me, c.salt);
  Tensor in = make_tensor(gen, in_shape, c.dtype);
  Tensor out = c.variant == 1 ? in.narrow(0, me * m, m)
                              : make_sentinel(c, me, out_shape);
  const Tensor in0 = c.variant == 0 ? snapshot(in) : Tensor();
  Pending p{where(g, c.describe("reduce_scatter")), {}, {}};
  p.works.push_back(ferry::reduce_scatter(in, out, g, c.op));
  p.verify = [&ctx, c, W, me, m, ie, out_shape, in, in0, out, w = p.where] {
    const int64_t total = W * m * ie;
    const auto& ref = ctx.shared(key("reduce_scatter", c, W, total), [&] {
      return reduce_reference(c.dtype, c.op, W, 0, total, c.salt);
    });
    ctx.expect_tensor(w, out, c.dtype, out_shape, slice(ref, me * m * ie, m * ie),
                      rtol_for(c.dtype, c.op));
    if (c.variant == 0) ctx.expect_unchanged(w + " (input must be unchanged)", in, in0);
  };
  return p;
}

Pending start_reduce_scatter_v(Ctx& ctx, const Group& g, const OpCase& c) {
  const int W = g.size(), me = g.rank();
  const int64_t ie = row_numel(c.inner);
  const std::vector<int64_t> sizes = uneven_sizes(W, c.rows, c.salt);
  const int64_t total_rows = sum_of(sizes);
  const Shape in_shape = shape_of(total_rows, c.inner);
  const Shape out_shape = shape_of(sizes[static_cast<size_t>(me)], c.inner);
  const Gen gen(pattern_for(c.op), c.dtype, me, c.salt);
  Tensor in = make_tensor(gen, in_shape, c.dtype);
  Tensor out = make_sentinel(c, me, out_shape);
  const Tensor in0 = snapshot(in);
  Pending p{where(g, c.describe(c.variant == 1 ? "reduce_scatter (list)" : "reduce_scatter_v")),
            {}, {}};
  if (c.variant == 1) {
    // The list form, each block a tensor of its own (not views of one buffer), so nothing
    // may assume they lie end to end.
    std::vector<Tensor> blocks;
    int64_t row = 0;
    for (int64_t rows : sizes) {
      blocks.push_back(in.narrow(0, row, rows).clone());
      row += rows;
    }
    p.works.push_back(ferry::reduce_scatter(blocks, out, g, c.op));
  } else {
    p.works.push_back(ferry::reduce_scatter_v(in, out, sizes, g, c.op));
  }
  p.verify = [&ctx, c, W, me, ie, sizes, total_rows, out_shape, in, in0, out, w = p.where] {
    const int64_t total = total_rows * ie;
    const auto& ref = ctx.shared(key("reduce_scatter_v", c, W, total), [&] {
      return reduce_reference(c.dtype, c.op, W, 0, total, c.salt);
    });
    const int64_t off = prefix(sizes)[static_cast<size_t>(me)] * ie;
    ctx.expect_tensor(w, out, c.dtype, out_shape,
                      slice(ref, off, sizes[static_cast<size_t>(me)] * ie), rtol_for(c.dtype, c.op));
    ctx.expect_unchanged(w + " (input must be unchanged)", in, in0);
  };
  return p;
}

Pending start_broadcast(Ctx& ctx, const Group& g, const OpCase& c) {
  const int me = g.rank();
  const Shape shape = shape_of(c.rows, c.inner);
  const int64_t n = c.rows * row_numel(c.inner);
  Tensor t = me == c.root ? make_tensor(moving(c, c.root), shape, c.dtype) : make_sentinel(c, me, shape);
  Pending p{where(g, c.describe("broadcast")), {}, {}};
  p.works.push_back(ferry::broadcast(t, c.root, g));
  p.verify = [&ctx, c, n, shape, t, w = p.where] {
    ctx.expect_tensor(w, t, c.dtype, shape, gen_values(moving(c, c.root), 0, n));
  };
  return p;
}

Pending start_all_gather(Ctx& ctx, const Group& g, const OpCase& c) {
  const int W = g.size(), me = g.rank();
  const int64_t ie = row_numel(c.inner), m = c.rows;
  const Shape in_shape = shape_of(m, c.inner), out_shape = shape_of(W * m, c.inner);
  Tensor out = make_sentinel(c, me, out_shape);
  Tensor in;
  if (c.variant == 1) {
    in = out.narrow(0, me * m, m);
    fill_from(in, moving(c, me));
  } else {
    in = make_tensor(moving(c, me), in_shape, c.dtype);
  }
  const Tensor in0 = c.variant == 0 ? snapshot(in) : Tensor();
  Pending p{where(g, c.describe("all_gather")), {}, {}};
  p.works.push_back(ferry::all_gather(in, out, g));
  p.verify = [&ctx, c, W, m, ie, out_shape, in, in0, out, w = p.where] {
    const auto& ref = ctx.shared(key("all_gather", c, W, m * ie), [&] {
      return concat_ranks(c, std::vector<int64_t>(static_cast<size_t>(W), 0),
                          std::vector<int64_t>(static_cast<size_t>(W), m * ie));
    });
    ctx.expect_tensor(w, out, c.dtype, out_shape, ref);
    if (c.variant == 0) ctx.expect_unchanged(w + " (input must be unchanged)", in, in0);
  };
  return p;
}

Pending start_all_gather_v(Ctx& ctx, const Group& g, const OpCase& c) {
  const int W = g.size(), me = g.rank();
  const int64_t ie = row_numel(c.inner);
  const std::vector<int64_t> sizes = uneven_sizes(W, c.rows, c.salt);
  const Shape in_shape = shape_of(sizes[static_cast<size_t>(me)], c.inner);
  const Shape out_shape = shape_of(sum_of(sizes), c.inner);
  Tensor in = make_tensor(moving(c, me), in_shape, c.dtype);
  Tensor out = make_sentinel(c, me, out_shape);
  Pending p{where(g, c.describe("all_gather_v")), {}, {}};
  p.works.push_back(ferry::all_gather_v(in, out, sizes, g));
  p.verify = [&ctx, c, W, ie, sizes, out_shape, out, w = p.where] {
    std::vector<int64_t> counts;
    for (int64_t s : sizes) counts.push_back(s * ie);
    const auto& ref = ctx.shared(key("all_gather_v", c, W, 0), [&] {
      return concat_ranks(c, std::vector<int64_t>(static_cast<size_t>(W), 0), counts);
    });
    ctx.expect_tensor(w, out, c.dtype, out_shape, ref);
  };
  return p;
}

Pending start_all_gather_v_exchanged(Ctx& ctx, const Group& g, const OpCase& c) {
  const int W = g.size(), me = g.rank();
  const int64_t ie = row_numel(c.inner);
  const std::vector<int64_t> sizes = uneven_sizes(W, c.rows, c.salt);
  Tensor in = make_tensor(moving(c, me), shape_of(sizes[static_cast<size_t>(me)], c.inner), c.dtype);
  Pending p{where(g, c.describe("all_gather_v(exchanged sizes)")), {}, {}};
  p.works.push_back(ferry::all_gather_v(in, g));
  p.verify = [&ctx, c, W, ie, sizes, work = p.works[0], w = p.where]() mutable {
    const std::vector<Tensor>& outs = work.outputs();
    FT_CHECK(ctx, outs.size() == 2, w);
    if (outs.size() != 2) return;
    std::vector<double> size_values(sizes.begin(), sizes.end());
    ctx.expect_tensor(w + " output(1) (sizes)", work.output(1), DType::Int64,
                      Shape{static_cast<int64_t>(W)}, size_values);
    std::vector<int64_t> counts;
    for (int64_t s : sizes) counts.push_back(s * ie);
    const auto& ref = ctx.shared(key("all_gather_v", c, W, 0), [&] {
      return concat_ranks(c, std::vector<int64_t>(static_cast<size_t>(W), 0), counts);
    });
    ctx.expect_tensor(w + " output(0)", work.output(0), c.dtype, shape_of(sum_of(sizes), c.inner), ref);
  };
  return p;
}

Pending start_all_to_all_single(Ctx& ctx, const Group& g, const OpCase& c) {
  const int W = g.size(), me = g.rank();
  const int64_t ie = row_numel(c.inner), m = c.rows;
  const Shape shape = shape_of(W * m, c.inner);
  Tensor in = make_tensor(moving(c, me), shape, c.dtype);
  Tensor out = make_sentinel(c, me, shape);
  const Tensor in0 = snapshot(in);
  Pending p{where(g, c.describe("all_to_all_single")), {}, {}};
  p.works.push_back(ferry::all_to_all_single(in, out, g));
  p.verify = [&ctx, c, W, me, m, ie, shape, in, in0, out, w = p.where] {
    // Block k of my output is block `me` of rank k's input.
    const std::vector<double> ref =
        concat_ranks(c, std::vector<int64_t>(static_cast<size_t>(W), me * m * ie),
                     std::vector<int64_t>(static_cast<size_t>(W), m * ie));
    ctx.expect_tensor(w, out, c.dtype, shape, ref);
    ctx.expect_unchanged(w + " (input must be unchanged)", in, in0);
  };
  return p;
}

Pending start_all_to_all_single_v(Ctx& ctx, const Group& g, const OpCase& c) {
  const int W = g.size(), me = g.rank();
  const int64_t ie = row_numel(c.inner);
  std::vector<int64_t> in_splits, out_splits, offsets;
  for (int j = 0; j < W; ++j) in_splits.push_back(a2a_rows(W, c.rows, me, j, c.salt));
  for (int k = 0; k < W; ++k) {
    out_splits.push_back(a2a_rows(W, c.rows, k, me, c.salt));
    int64_t off = 0;  // where my rows start in rank k's input
    for (int j = 0; j < me; ++j) off += a2a_rows(W, c.rows, k, j, c.salt);
    offsets.push_back(off * ie);
  }
  const Shape in_shape = shape_of(sum_of(in_splits), c.inner);
  const Shape out_shape = shape_of(sum_of(out_splits), c.inner);
  Tensor in = make_tensor(moving(c, me), in_shape, c.dtype);
  Tensor out = make_sentinel(c, me, out_shape);
  const Tensor in0 = snapshot(in);
  Pending p{where(g, c.describe("all_to_all_single(splits)")), {}, {}};
  p.works.push_back(ferry::all_to_all_single(in, out, out_splits, in_splits, g));
  p.verify = [&ctx, c, ie, out_splits, offsets, out_shape, in, in0, out, w = p.where] {
    std::vector<int64_t> counts;
    for (int64_t s : out_splits) counts.push_back(s * ie);
    ctx.expect_tensor(w, out, c.dtype, out_shape, concat_ranks(c, offsets, counts));
    ctx.expect_unchanged(w + " (input must be unchanged)", in, in0);
  };
  return p;
}

Pending start_all_to_all(Ctx& ctx, const Group& g, const OpCase& c) {
  const int W = g.size(), me = g.rank();
  const int64_t ie = row_numel(c.inner);
  std::vector<Tensor> inputs, outputs;
  std::vector<int64_t> offsets;
  int64_t my_off = 0;
  for (int j = 0; j < W; ++j) {  // inputs[j]: 1-D, my data from flat offset my_off
    const int64_t rows = a2a_rows(W, c.rows, me, j, c.salt);
    inputs.push_back(make_tensor(moving(c, me), Shape{rows * ie}, c.dtype, my_off));
    my_off += rows * ie;
  }
  for (int k = 0; k < W; ++k) {  // outputs[k]: [rows, inner], rank k's data for me
    outputs.push_back(make_sentinel(c, me, shape_of(a2a_rows(W, c.rows, k, me, c.salt), c.inner)));
    int64_t off = 0;
    for (int j = 0; j < me; ++j) off += a2a_rows(W, c.rows, k, j, c.salt);
    offsets.push_back(off * ie);
  }
  std::vector<Tensor> inputs0;
  for (const Tensor& t : inputs) inputs0.push_back(snapshot(t));
  Pending p{where(g, c.describe("all_to_all(lists)")), {}, {}};
  p.works.push_back(ferry::all_to_all(inputs, outputs, g));
  p.verify = [&ctx, c, W, me, ie, offsets, inputs, inputs0, outputs, w = p.where] {
    for (int k = 0; k < W; ++k) {
      const Tensor& o = outputs[static_cast<size_t>(k)];
      const int64_t rows = a2a_rows(W, c.rows, k, me, c.salt);
      ctx.expect_tensor(w + " outputs[" + std::to_string(k) + "]", o, c.dtype, shape_of(rows, c.inner),
                        gen_values(moving(c, k), offsets[static_cast<size_t>(k)], rows * ie));
    }
    for (size_t j = 0; j < inputs.size(); ++j)
      ctx.expect_unchanged(w + " (inputs must be unchanged)", inputs[j], inputs0[j]);
  };
  return p;
}

Pending start_gather(Ctx& ctx, const Group& g, const OpCase& c) {
  const int W = g.size(), me = g.rank();
  const Shape shape = shape_of(c.rows, c.inner);
  const int64_t n = c.rows * row_numel(c.inner);
  Tensor in = make_tensor(moving(c, me), shape, c.dtype);
  std::vector<Tensor> outputs;
  if (me == c.root)
    for (int k = 0; k < W; ++k) outputs.push_back(make_sentinel(c, me, shape, k * n));
  const Tensor in0 = snapshot(in);
  Pending p{where(g, c.describe("gather")), {}, {}};
  p.works.push_back(ferry::gather(in, outputs, c.root, g));
  p.verify = [&ctx, c, n, shape, in, in0, outputs, w = p.where] {
    for (size_t k = 0; k < outputs.size(); ++k)
      ctx.expect_tensor(w + " outputs[" + std::to_string(k) + "]", outputs[k], c.dtype, shape,
                        gen_values(moving(c, static_cast<int>(k)), 0, n));
    ctx.expect_unchanged(w + " (input must be unchanged)", in, in0);
  };
  return p;
}

Pending start_scatter(Ctx& ctx, const Group& g, const OpCase& c) {
  const int W = g.size(), me = g.rank();
  const Shape shape = shape_of(c.rows, c.inner);
  const int64_t n = c.rows * row_numel(c.inner);
  std::vector<Tensor> inputs;  // inputs[k]: the root's data from flat offset k * n
  if (me == c.root)
    for (int k = 0; k < W; ++k) inputs.push_back(make_tensor(moving(c, c.root), shape, c.dtype, k * n));
  Tensor out = make_sentinel(c, me, shape);
  std::vector<Tensor> inputs0;
  for (const Tensor& t : inputs) inputs0.push_back(snapshot(t));
  Pending p{where(g, c.describe("scatter")), {}, {}};
  p.works.push_back(ferry::scatter(inputs, out, c.root, g));
  p.verify = [&ctx, c, me, n, shape, inputs, inputs0, out, w = p.where] {
    ctx.expect_tensor(w, out, c.dtype, shape, gen_values(moving(c, c.root), me * n, n));
    for (size_t k = 0; k < inputs.size(); ++k)
      ctx.expect_unchanged(w + " (inputs must be unchanged)", inputs[k], inputs0[k]);
  };
  return p;
}

Pending start_barrier(Ctx& ctx, const Group& g, const OpCase& c) {
  const int W = g.size(), me = g.rank();
  if (c.variant == 1 && me == W - 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  // steady_clock is CLOCK_MONOTONIC, one clock for every thread and process of the host: the
  // ranks compare arrival times whether they are threads (run_ranks) or processes (mpiexec).
  const double arrived = seconds_now();
  Pending p{where(g, c.describe("barrier")), {}, {}};
  p.works.push_back(ferry::barrier(g));
  p.verify = [&ctx, g, arrived, W, w = p.where] {
    const double left = seconds_now();  // the barrier's wait has returned
    Tensor all = ferry::zeros({W}, DType::Float64);
    ferry::all_gather(ferry::from_vector<double>({arrived}), all, g).wait();
    for (int k = 0; k < W; ++k) {
      const double t = all.get_flat(k);
      ctx.expect(t <= left, [&] {
        return w + ": left the barrier " + std::to_string(t - left) + " s before rank " +
               std::to_string(k) + " arrived";
      });
    }
  };
  return p;
}

Pending start_ring_send_recv(Ctx& ctx, const Group& g, const OpCase& c) {
  const int W = g.size(), me = g.rank();
  Pending p{where(g, c.describe("send/recv ring")), {}, [] {}};
  if (W == 1) return p;
  const Shape shape = shape_of(c.rows, c.inner);
  const int64_t n = c.rows * row_numel(c.inner);
  const int next = (me + 1) % W, prev = (me + W - 1) % W;
  const int tag = 100 + static_cast<int>(c.salt % 1000);
  Tensor out = make_tensor(moving(c, me), shape, c.dtype);
  Tensor in = make_sentinel(c, me, shape);
  p.works.push_back(ferry::send(out, next, g, tag));
  p.works.push_back(ferry::recv(in, prev, g, tag));
  p.verify = [&ctx, c, n, prev, shape, in, w = p.where] {
    ctx.expect_tensor(w, in, c.dtype, shape, gen_values(moving(c, prev), 0, n));
  };
  return p;
}

}  // namespace ftest
