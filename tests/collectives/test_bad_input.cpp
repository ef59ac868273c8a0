// Bad input: every case must throw ferry::InvalidArgument from the call itself (before a Work
// exists), on every rank that passes it, and leave the group usable: not poisoned, sequence
// number not advanced, and a following all_reduce correct. Each case runs on a fresh world on
// every rank (so nobody waits for anyone), at world sizes 1, 2 and 3 where it applies; cases
// that only the root can detect run at world size 1. Finally one case where only rank 0 passes
// bad input: it fails at once, the others time out, and their group is poisoned.
#include "spmd_case.h"
#include "test_helpers.h"

#include <catch2/catch.hpp>

#include <latch>

using namespace ftest;

namespace {

using ferry::zeros;
constexpr DType F32 = DType::Float32;

struct BadCase {
  const char* name;
  int min_world;
  int max_world;
  std::function<Work(const Group&)> call;
};

std::vector<int64_t> sizes_of(int n, int64_t each) { return std::vector<int64_t>(static_cast<size_t>(n), each); }

// Sizes with a negative entry that still add up to 2 * W (W >= 2).
std::vector<int64_t> with_negative(int W) {
  std::vector<int64_t> s = sizes_of(W, 2);
  s[0] = -1;
  s[1] = 5;
  return s;
}

std::vector<Tensor> tensors(int n, int64_t rows, DType dt = F32) {
  std::vector<Tensor> v;
  for (int i = 0; i < n; ++i) v.push_back(zeros({rows}, dt));
  return v;
}

std::vector<BadCase> bad_cases() {
  const int kAny = 1 << 20;
  using G = const Group&;
  return {
      // ---- all_reduce ----
      {"all_reduce: output dtype differs", 1, kAny, [](G g) { return ferry::all_reduce(zeros({8}), zeros({8}, DType::Float64), g); }},
      {"all_reduce: output shape differs", 1, kAny, [](G g) { return ferry::all_reduce(zeros({8}), zeros({9}), g); }},
      {"all_reduce: output same numel, other shape", 1, kAny, [](G g) { return ferry::all_reduce(zeros({8}), zeros({2, 4}), g); }},
      {"all_reduce: partially overlapping views of one buffer", 1, kAny, [](G g) {
         Tensor buf = zeros({16});
         return ferry::all_reduce(buf.narrow(0, 0, 8), buf.narrow(0, 4, 8), g);
       }},
      {"all_reduce: avg on int32", 1, kAny, [](G g) { return ferry::all_reduce(zeros({4}, DType::Int32), g, ReduceOp::Avg); }},
      {"all_reduce: avg on int64", 1, kAny, [](G g) { return ferry::all_reduce(zeros({4}, DType::Int64), g, ReduceOp::Avg); }},
      {"all_reduce: avg on uint8, out of place", 1, kAny, [](G g) {
         return ferry::all_reduce(zeros({4}, DType::UInt8), zeros({4}, DType::UInt8), g, ReduceOp::Avg);
       }},
      {"all_reduce: undefined tensor", 1, kAny, [](G g) { return ferry::all_reduce(Tensor(), g); }},
      {"all_reduce: undefined input", 1, kAny, [](G g) { return ferry::all_reduce(Tensor(), zeros({4}), g); }},
      {"all_reduce: undefined output", 1, kAny, [](G g) { return ferry::all_reduce(zeros({4}), Tensor(), g); }},
      // ---- reduce ----
      {"reduce: root -1", 1, kAny, [](G g) { return ferry::reduce(zeros({4}), zeros({4}), -1, g); }},
      {"reduce: root == size", 1, kAny, [](G g) { return ferry::reduce(zeros({4}), zeros({4}), g.size(), g); }},
      {"reduce: avg on int32", 1, kAny, [](G g) {
         return ferry::reduce(zeros({4}, DType::Int32), zeros({4}, DType::Int32), 0, g, ReduceOp::Avg);
       }},
      {"reduce: undefined input", 1, kAny, [](G g) { return ferry::reduce(Tensor(), zeros({4}), 0, g); }},
      {"reduce: root output dtype differs", 1, 1, [](G g) { return ferry::reduce(zeros({4}), zeros({4}, DType::Int32), 0, g); }},
      {"reduce: root output shape differs", 1, 1, [](G g) { return ferry::reduce(zeros({4}), zeros({5}), 0, g); }},
      {"reduce: root output undefined", 1, 1, [](G g) { return ferry::reduce(zeros({4}), Tensor(), 0, g); }},
      // ---- reduce_scatter ----
      {"reduce_scatter: input rows not a multiple of W", 2, kAny, [](G g) {
         return ferry::reduce_scatter(zeros({2 * g.size() + 1}), zeros({2}), g);
       }},
      {"reduce_scatter: output rows != input rows / W", 1, kAny, [](G g) {
         return ferry::reduce_scatter(zeros({2 * g.size()}), zeros({3}), g);
       }},
      {"reduce_scatter: torch.distributed's order (output, input)", 2, kAny, [](G g) {
         return ferry::reduce_scatter(zeros({2}), zeros({2 * g.size()}), g);
       }},
      {"reduce_scatter: output dtype differs", 1, kAny, [](G g) {
         return ferry::reduce_scatter(zeros({2 * g.size()}), zeros({2}, DType::Float16), g);
       }},
      {"reduce_scatter: inner dims differ", 1, kAny, [](G g) {
         return ferry::reduce_scatter(zeros({2 * g.size(), 3}), zeros({2, 4}), g);
       }},
      {"reduce_scatter: output is another rank's block of input", 2, kAny, [](G g) {
         Tensor in = zeros({2 * g.size()});
         return ferry::reduce_scatter(in, in.narrow(0, 2 * ((g.rank() + 1) % g.size()), 2), g);
       }},
      {"reduce_scatter: output partially overlaps input", 1, kAny, [](G g) {
         Tensor buf = zeros({2 * g.size() + 1});
         return ferry::reduce_scatter(buf.narrow(0, 0, 2 * g.size()), buf.narrow(0, 2 * g.size() - 1, 2), g);
       }},
      {"reduce_scatter: avg on int64", 1, kAny, [](G g) {
         return ferry::reduce_scatter(zeros({2 * g.size()}, DType::Int64), zeros({2}, DType::Int64), g, ReduceOp::Avg);
       }},
      // ---- reduce_scatter, list form ----
      {"reduce_scatter (list): one input too few", 1, kAny, [](G g) {
         return ferry::reduce_scatter(tensors(g.size() - 1, 2), zeros({2}), g);
       }},
      {"reduce_scatter (list): an input of another dtype", 2, kAny, [](G g) {
         std::vector<Tensor> in = tensors(g.size(), 2);
         in[1] = zeros({2}, DType::Float64);
         return ferry::reduce_scatter(in, zeros({2}), g);
       }},
      {"reduce_scatter (list): an input with other rows", 2, kAny, [](G g) {
         std::vector<Tensor> in(static_cast<size_t>(g.size()), zeros({2, 3}));
         in[1] = zeros({2, 4});
         return ferry::reduce_scatter(in, zeros({2, 3}), g);
       }},
      {"reduce_scatter (list): output not shaped like this rank's input", 1, kAny, [](G g) {
         return ferry::reduce_scatter(tensors(g.size(), 2), zeros({3}), g);
       }},
      {"reduce_scatter (list): output overlaps an input", 1, kAny, [](G g) {
         std::vector<Tensor> in = tensors(g.size(), 2);
         return ferry::reduce_scatter(in, in[0], g);
       }},
      {"reduce_scatter (list): avg on int32", 1, kAny, [](G g) {
         return ferry::reduce_scatter(tensors(g.size(), 2, DType::Int32),
                                      zeros({2}, DType::Int32), g, ReduceOp::Avg);
       }},
      {"reduce_scatter (list): undefined input", 1, kAny, [](G g) {
         std::vector<Tensor> in = tensors(g.size(), 2);
         in.back() = Tensor();
         return ferry::reduce_scatter(in, zeros({2}), g);
       }},
      // ---- reduce_scatter_v ----
      {"reduce_scatter_v: sizes do not add up", 1, kAny, [](G g) {
         return ferry::reduce_scatter_v(zeros({2 * g.size() + 1}), zeros({2}), sizes_of(g.size(), 2), g);
       }},
      {"reduce_scatter_v: one size too many", 1, kAny, [](G g) {
         return ferry::reduce_scatter_v(zeros({2 * g.size() + 2}), zeros({2}), sizes_of(g.size() + 1, 2), g);
       }},
      {"reduce_scatter_v: one size too few", 2, kAny, [](G g) {
         return ferry::reduce_scatter_v(zeros({2 * g.size() - 2}), zeros({2}), sizes_of(g.size() - 1, 2), g);
       }},
      {"reduce_scatter_v: no sizes", 1, kAny, [](G g) { return ferry::reduce_scatter_v(zeros({0}), zeros({0}), {}, g); }},
      {"reduce_scatter_v: negative size", 2, kAny, [](G g) {
         const auto s = with_negative(g.size());
         return ferry::reduce_scatter_v(zeros({2 * g.size()}), zeros({std::max<int64_t>(s[g.rank()], 0)}), s, g);
       }},
      {"reduce_scatter_v: output rows != sizes[rank]", 1, kAny, [](G g) {
         return ferry::reduce_scatter_v(zeros({2 * g.size()}), zeros({3}), sizes_of(g.size(), 2), g);
       }},
      {"reduce_scatter_v: avg on uint8", 1, kAny, [](G g) {
         return ferry::reduce_scatter_v(zeros({2 * g.size()}, DType::UInt8), zeros({2}, DType::UInt8),
                                        sizes_of(g.size(), 2), g, ReduceOp::Avg);
       }},
      // ---- broadcast ----
      {"broadcast: root -1", 1, kAny, [](G g) { return ferry::broadcast(zeros({4}), -1, g); }},
      {"broadcast: root == size", 1, kAny, [](G g) { return ferry::broadcast(zeros({4}), g.size(), g); }},
      {"broadcast: undefined tensor", 1, kAny, [](G g) { return ferry::broadcast(Tensor(), 0, g); }},
      // ---- all_gather / all_gather_v ----
      {"all_gather: output rows != W * input rows", 1, kAny, [](G g) {
         return ferry::all_gather(zeros({3}), zeros({3 * g.size() + 1}), g);
       }},
      {"all_gather: torch.distributed's order (output, input)", 2, kAny, [](G g) {
         return ferry::all_gather(zeros({3 * g.size()}), zeros({3}), g);
       }},
      {"all_gather: output dtype differs", 1, kAny, [](G g) {
         return ferry::all_gather(zeros({3}), zeros({3 * g.size()}, DType::BFloat16), g);
       }},
      {"all_gather: inner dims differ", 1, kAny, [](G g) { return ferry::all_gather(zeros({3, 2}), zeros({3 * g.size(), 3}), g); }},
      {"all_gather: input is another rank's block of output", 2, kAny, [](G g) {
         Tensor out = zeros({3 * g.size()});
         return ferry::all_gather(out.narrow(0, 3 * ((g.rank() + 1) % g.size()), 3), out, g);
       }},
      {"all_gather: undefined input", 1, kAny, [](G g) { return ferry::all_gather(Tensor(), zeros({3}), g); }},
      {"all_gather_v: sizes do not add up to output rows", 1, kAny, [](G g) {
         return ferry::all_gather_v(zeros({2}), zeros({2 * g.size() + 1}), sizes_of(g.size(), 2), g);
       }},
      {"all_gather_v: input rows != sizes[rank]", 1, kAny, [](G g) {
         return ferry::all_gather_v(zeros({3}), zeros({2 * g.size()}), sizes_of(g.size(), 2), g);
       }},
      {"all_gather_v: negative size", 2, kAny, [](G g) {
         const auto s = with_negative(g.size());
         return ferry::all_gather_v(zeros({std::max<int64_t>(s[g.rank()], 0)}), zeros({2 * g.size()}), s, g);
       }},
      {"all_gather_v: one size too many", 1, kAny, [](G g) {
         return ferry::all_gather_v(zeros({2}), zeros({2 * g.size() + 2}), sizes_of(g.size() + 1, 2), g);
       }},
      {"all_gather_v: output dtype differs", 1, kAny, [](G g) {
         return ferry::all_gather_v(zeros({2}), zeros({2 * g.size()}, DType::Int32), sizes_of(g.size(), 2), g);
       }},
      {"all_gather_v (exchanged sizes): undefined input", 1, kAny, [](G g) { return ferry::all_gather_v(Tensor(), g); }},
      // ---- all_to_all_single ----
      {"all_to_all_single: rows not a multiple of W", 2, kAny, [](G g) {
         return ferry::all_to_all_single(zeros({2 * g.size() + 1}), zeros({2 * g.size() + 1}), g);
       }},
      {"all_to_all_single: output shape differs", 1, kAny, [](G g) {
         return ferry::all_to_all_single(zeros({2 * g.size()}), zeros({3 * g.size()}), g);
       }},
      {"all_to_all_single: output dtype differs", 1, kAny, [](G g) {
         return ferry::all_to_all_single(zeros({2 * g.size()}), zeros({2 * g.size()}, DType::Float64), g);
       }},
      {"all_to_all_single: output is input", 1, kAny, [](G g) {
         Tensor t = zeros({2 * g.size()});
         return ferry::all_to_all_single(t, t, g);
       }},
      {"all_to_all_single: output partially overlaps input", 1, kAny, [](G g) {
         Tensor buf = zeros({4 * g.size()});
         return ferry::all_to_all_single(buf.narrow(0, 0, 2 * g.size()), buf.narrow(0, g.size(), 2 * g.size()), g);
       }},
      {"all_to_all_single(splits): input splits do not add up", 1, kAny, [](G g) {
         return ferry::all_to_all_single(zeros({g.size() + 1}), zeros({g.size()}), sizes_of(g.size(), 1), sizes_of(g.size(), 1), g);
       }},
      {"all_to_all_single(splits): output splits do not add up", 1, kAny, [](G g) {
         return ferry::all_to_all_single(zeros({g.size()}), zeros({g.size() + 1}), sizes_of(g.size(), 1), sizes_of(g.size(), 1), g);
       }},
      {"all_to_all_single(splits): negative split", 2, kAny, [](G g) {
         return ferry::all_to_all_single(zeros({2 * g.size()}), zeros({2 * g.size()}), sizes_of(g.size(), 2), with_negative(g.size()), g);
       }},
      {"all_to_all_single(splits): one split too many", 1, kAny, [](G g) {
         return ferry::all_to_all_single(zeros({g.size() + 1}), zeros({g.size()}), sizes_of(g.size(), 1), sizes_of(g.size() + 1, 1), g);
       }},
      {"all_to_all_single(splits): output is input", 1, kAny, [](G g) {
         Tensor t = zeros({g.size()});
         return ferry::all_to_all_single(t, t, sizes_of(g.size(), 1), sizes_of(g.size(), 1), g);
       }},
      // ---- all_to_all (lists) ----
      {"all_to_all: one input too many", 1, kAny, [](G g) { return ferry::all_to_all(tensors(g.size() + 1, 2), tensors(g.size(), 2), g); }},
      {"all_to_all: one output too few", 1, kAny, [](G g) { return ferry::all_to_all(tensors(g.size(), 2), tensors(g.size() - 1, 2), g); }},
      {"all_to_all: mixed dtypes in inputs", 1, kAny, [](G g) {
         std::vector<Tensor> in = tensors(g.size(), 2);
         in.back() = zeros({1}, DType::Float64);
         return ferry::all_to_all(in, tensors(g.size(), 2), g);
       }},
      {"all_to_all: outputs dtype differs from inputs", 1, kAny, [](G g) {
         return ferry::all_to_all(tensors(g.size(), 2), tensors(g.size(), 2, DType::Int32), g);
       }},
      {"all_to_all: undefined tensor in list", 1, kAny, [](G g) {
         std::vector<Tensor> out = tensors(g.size(), 2);
         out.back() = Tensor();
         return ferry::all_to_all(tensors(g.size(), 2), out, g);
       }},
      // ---- gather / scatter ----
      {"gather: root -1", 1, kAny, [](G g) { return ferry::gather(zeros({2}), tensors(g.size(), 2), -1, g); }},
      {"gather: root == size", 1, kAny, [](G g) { return ferry::gather(zeros({2}), tensors(g.size(), 2), g.size(), g); }},
      {"gather: undefined input", 1, kAny, [](G g) { return ferry::gather(Tensor(), tensors(g.size(), 2), 0, g); }},
      {"gather: root outputs list too long", 1, 1, [](G g) { return ferry::gather(zeros({2}), tensors(2, 2), 0, g); }},
      {"gather: root outputs list empty", 1, 1, [](G g) { return ferry::gather(zeros({2}), {}, 0, g); }},
      {"gather: root output dtype differs", 1, 1, [](G g) { return ferry::gather(zeros({2}), tensors(1, 2, DType::UInt8), 0, g); }},
      {"scatter: root -1", 1, kAny, [](G g) { return ferry::scatter(tensors(g.size(), 2), zeros({2}), -1, g); }},
      {"scatter: root == size", 1, kAny, [](G g) { return ferry::scatter(tensors(g.size(), 2), zeros({2}), g.size(), g); }},
      {"scatter: undefined output", 1, kAny, [](G g) { return ferry::scatter(tensors(g.size(), 2), Tensor(), 0, g); }},
      {"scatter: root inputs list too long", 1, 1, [](G g) { return ferry::scatter(tensors(2, 2), zeros({2}), 0, g); }},
      {"scatter: root input dtype differs", 1, 1, [](G g) { return ferry::scatter(tensors(1, 2, DType::Int64), zeros({2}), 0, g); }},
      // ---- split (collective, MPI_Comm_split: color >= 0 or kUndefinedColor) ----
      {"split: negative color other than kUndefinedColor", 1, kAny, [](G g) {
         (void)g.split(-5, 0);
         return Work();
       }},
      // ---- point to point ----
      {"send: dst -1", 1, kAny, [](G g) { return ferry::send(zeros({2}), -1, g); }},
      {"send: dst == size", 1, kAny, [](G g) { return ferry::send(zeros({2}), g.size(), g); }},
      {"recv: src == size", 1, kAny, [](G g) { return ferry::recv(zeros({2}), g.size(), g); }},
      {"send: undefined tensor", 1, kAny, [](G g) { return ferry::send(Tensor(), (g.rank() + 1) % g.size(), g); }},
      {"recv: undefined tensor", 1, kAny, [](G g) { return ferry::recv(Tensor(), (g.rank() + 1) % g.size(), g); }},
  };
}

// The group still works after a rejected call: a correct all_reduce.
void check_still_usable(Ctx& ctx, Group& g, const std::string& w) {
  const int W = g.size();
  Tensor t = ferry::full({3}, g.rank() + 1, DType::Int32);
  ferry::all_reduce(t, g).wait();
  ctx.expect_tensor(w + " (all_reduce afterwards)", t, DType::Int32, {3},
                    std::vector<double>(3, W * (W + 1) / 2.0));
}


// The call throws InvalidArgument on this rank, and leaves the group usable.
void check_rejected(Ctx& ctx, Group& g, const BadCase& bad) {
  const std::string w = where(g, bad.name);
  const uint64_t seq = g.sequence_number();
  expect_invalid(ctx, w, [&] { return bad.call(g); });
  FT_CHECK(ctx, !g.poisoned(), w + ": InvalidArgument must leave the group usable");
  FT_CHECK(ctx, g.sequence_number() == seq, w + ": a rejected call must not take a sequence number");
  check_still_usable(ctx, g, w);
}

// Under mpiexec the world is given: every case runs on it, and those only a root can detect
// (max_world 1) on a one-rank group split off it.
void bad_input_on_one_world(Group& g, Ctx& ctx) {
  Group alone = g.split(g.rank(), 0);
  for (const BadCase& bad : bad_cases()) {
    if (g.size() >= bad.min_world && g.size() <= bad.max_world)
      check_rejected(ctx, g, bad);
    else if (bad.min_world <= 1 && bad.max_world < g.size())
      check_rejected(ctx, alone, bad);
  }
}

[[maybe_unused]] const bool kBadInputRegistered = register_spmd_case(
    "bad input: InvalidArgument from the call; on every rank", "[bad_input]",
    bad_input_on_one_world);

}  // namespace

TEST_CASE("bad input: InvalidArgument from the call; on every rank", "[bad_input]") {
  ScopedDefaultTimeout timeout(std::chrono::milliseconds(5000));  // nothing may hang for long
  const int world = GENERATE(1, 2, 3);
  for (const BadCase& bad : bad_cases()) {
    if (world < bad.min_world || world > bad.max_world) continue;
    INFO(bad.name);
    run_checked(world, [&bad](Group& g, Ctx& ctx) { check_rejected(ctx, g, bad); });
  }
}

FT_SPMD_CASE("bad input: InvalidArgument messages say what was given", "[bad_input]", 2) {
  try {
    (void)ferry::all_reduce(zeros({8}), zeros({9}), g);
    ctx.fail(where(g, "shape mismatch accepted"));
  } catch (const ferry::InvalidArgument& e) {
    const std::string msg = e.what();
    FT_CHECK(ctx, msg.find("all_reduce") != std::string::npos, where(g, "message names the op: " + msg));
    FT_CHECK(ctx, msg.find("[9]") != std::string::npos && msg.find("[8]") != std::string::npos,
             where(g, "message shows both shapes (shape_str form): " + msg));
  }
}

FT_SPMD_CASE("bad input: a call ported in torch.distributed's order is named as swapped", "[bad_input]", 2) {
  const int W = g.size();
  for (int which = 0; which < 2; ++which) {
    const char* op = which == 0 ? "all_gather" : "reduce_scatter";
    try {
      // torch: all_gather_into_tensor(output, input), reduce_scatter_tensor(output, input).
      (void)(which == 0 ? ferry::all_gather(zeros({3 * W}), zeros({3}), g)
                        : ferry::reduce_scatter(zeros({3}), zeros({3 * W}), g));
      ctx.fail(where(g, std::string(op) + ": swapped arguments accepted"));
    } catch (const ferry::InvalidArgument& e) {
      const std::string msg = e.what();
      FT_CHECK(ctx, msg.find(op) != std::string::npos && msg.find("look swapped") != std::string::npos,
               where(g, std::string(op) + ": the message says the arguments look swapped: " + msg));
    }
  }
}

FT_SPMD_CASE("torch-named entry points take torch.distributed's (output, input) order", "[bad_input]", 3) {
  const int W = g.size(), r = g.rank();
  Tensor gathered = zeros({2 * W});
  ferry::all_gather_into_tensor(gathered, ferry::full({2}, r + 1.0), g).wait();
  for (int i = 0; i < 2 * W; ++i)
    FT_CHECK(ctx, gathered.data<float>()[i] == i / 2 + 1.0f,
             where(g, "all_gather_into_tensor: element " + std::to_string(i)));
  Tensor mine = zeros({2});
  ferry::reduce_scatter_tensor(mine, ferry::arange(2 * W), g).wait();
  for (int i = 0; i < 2; ++i)
    FT_CHECK(ctx, mine.data<float>()[i] == float(W * (2 * r + i)),
             where(g, "reduce_scatter_tensor: element " + std::to_string(i)));
  // ferry's own order given to a torch name is reported as swapped, as the reverse is.
  try {
    (void)ferry::all_gather_into_tensor(zeros({3}), zeros({3 * W}), g);
    ctx.fail(where(g, "all_gather_into_tensor in ferry's order accepted"));
  } catch (const ferry::InvalidArgument& e) {
    FT_CHECK(ctx, std::string(e.what()).find("look swapped") != std::string::npos,
             where(g, std::string("all_gather_into_tensor: ") + e.what()));
  }
}

TEST_CASE("bad input on rank 0 only: rank 0 fails at once; the others time out", "[bad_input][timeout]") {
  ScopedDefaultTimeout timeout(std::chrono::milliseconds(500));
  const int world = GENERATE(2, 3);
  std::latch others_done(world - 1);
  run_checked(world, [&others_done](Group& g, Ctx& ctx) {
    const CountDownOnExit count_down(others_done, g.rank() != 0);
    const std::string w = where(g, "only rank 0 passes a mismatched output dtype");
    if (g.rank() == 0) {
      const auto t0 = std::chrono::steady_clock::now();
      expect_invalid(ctx, w, [&] { return ferry::all_reduce(zeros({8}), zeros({8}, DType::Float64), g); });
      const double s = seconds_since(t0);
      ctx.expect(s < 0.25, [&] { return w + ": InvalidArgument took " + std::to_string(s) + " s"; });
      FT_CHECK(ctx, !g.poisoned(), w + ": the rank that got InvalidArgument keeps a usable group");
      others_done.wait();  // stay alive (not failed) while the others run into their deadline
      return;
    }
    Tensor in = ferry::ones({8}), out = zeros({8});
    Work work = ferry::all_reduce(in, out, g);
    const auto t0 = std::chrono::steady_clock::now();
    const std::exception_ptr e = capture([&] { work.wait(); });
    const double s = seconds_since(t0);
    ctx.expect(error_kind(e) == "TimeoutError",
               [&] { return w + ": expected TimeoutError, got " + error_kind(e) + ": " + what_of(e); });
    ctx.expect(s >= 0.25 && s < 10.0, [&] { return w + ": timed out after " + std::to_string(s) + " s"; });
    FT_CHECK(ctx, g.poisoned(), w + ": a timeout poisons the group");
    FT_CHECK(ctx, !g.poison_reason().empty(), w);
    const auto t1 = std::chrono::steady_clock::now();
    const std::exception_ptr later = capture([&] { (void)ferry::all_reduce(in, out, g); });
    const double s1 = seconds_since(t1);
    ctx.expect(later != nullptr && error_kind(later) != "InvalidArgument" &&
                   error_kind(later).rfind("non-ferry", 0) != 0,
               [&] { return w + ": a call on a poisoned group must throw a ferry::Error, got " + error_kind(later); });
    ctx.expect(s1 < 0.25, [&] { return w + ": the poisoned call took " + std::to_string(s1) + " s"; });
  });
}
