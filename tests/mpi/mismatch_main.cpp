// MPI's default mode against calls that differ across ranks (mpiexec -n 2, 5 and 9): every
// case makes the odd ranks give another size, dtype, reduce op, split or root than the even
// ones, on a sub-group of its own (a failed op poisons its group), and expects MismatchError
// on every rank, soon, naming the op and what the ranks gave, never a result. The sizes are
// chosen to take each path MPI's collectives have: persistent requests (at most 8 KiB), the
// point-to-point rounds (2 to 4 ranks), MPI's non-blocking calls (5 ranks, and reduce, gather,
// scatter at any size), a key past the persistent requests' 64, and sizes that straddle 8 KiB;
// 9 ranks compare their keys by MPI_Iallgather, fewer by messages to every peer.
//
// Exit status 0 when this rank's checks passed (FERRY_TIMEOUT bounds every wait).
#include <ferry/ferry.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace ferry;

struct Checks {
  int rank = -1;
  int failed = 0;
  void expect(bool ok, const std::string& what) {
    if (ok) return;
    ++failed;
    std::fprintf(stderr, "[mismatch rank %d] FAILED %s\n", rank, what.c_str());
  }
};

struct Case {
  std::string what;
  std::function<void(Group&)> call;
  std::vector<std::string> named;  // what the message must say, on every rank
};

// Runs `k` on a fresh sub-group of `world`: MismatchError expected within 10 s.
void run_case(Group& world, Checks& c, const Case& k) {
  Group sub = world.split(0, world.rank());
  std::string kind = "none", what;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    k.call(sub);
  } catch (const MismatchError& e) {
    kind = "MismatchError";
    what = e.what();
  } catch (const std::exception& e) {
    kind = "other";
    what = e.what();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  c.expect(kind == "MismatchError",
           k.what + ": MismatchError expected, got '" + kind + "': " + what);
  for (const std::string& n : k.named)
    c.expect(what.find(n) != std::string::npos,
             k.what + ": the message names '" + n + "': " + what);
  c.expect(seconds < 10.0, k.what + ": the error comes within 10 s, not after " +
                               std::to_string(seconds) + " s");
  if (world.rank() == 0 && kind == "MismatchError")
    std::fprintf(stderr, "[mismatch] %s (%.3f s): %s\n", k.what.c_str(), seconds, what.c_str());
}

}  // namespace

int main() {
  Group world = init();
  Checks c{world.rank()};
  const int W = world.size();
  const bool odd = world.rank() % 2 == 1;
  std::vector<Case> cases = {
      // 16 KiB: the point-to-point rounds on 2 ranks, MPI_Iallreduce on 5.
      {"all_reduce of 4096 vs 4097 float32",
       [&](Group& g) {
         Tensor x = full({odd ? 4097 : 4096}, 1.0, DType::Float32);
         all_reduce(x, g).wait();
       },
       {"all_reduce", "4096 float32", "4097 float32"}},
      // 8 KiB on one side (a new persistent request), 8 KiB + 4 on the other.
      {"all_reduce of 2048 vs 2049 float32",
       [&](Group& g) {
         Tensor x = full({odd ? 2049 : 2048}, 1.0, DType::Float32);
         all_reduce(x, g).wait();
       },
       {"all_reduce", "2048 float32", "2049 float32"}},
      {"all_reduce of 4096 float32 vs int32",
       [&](Group& g) {
         Tensor x = full({4096}, 1.0, odd ? DType::Int32 : DType::Float32);
         all_reduce(x, g).wait();
       },
       {"4096 float32", "4096 int32"}},
      {"all_reduce sum vs max of 4096 float32",
       [&](Group& g) {
         Tensor x = full({4096}, 1.0, DType::Float32);
         all_reduce(x, g, odd ? ReduceOp::Max : ReduceOp::Sum).wait();
       },
       {"(sum)", "(max)"}},
      // Equal total rows, split differently: the uneven reduce_scatter.
      {"reduce_scatter_v split 2,2,... vs 1,3,...",
       [&](Group& g) {
         std::vector<int64_t> sizes(static_cast<size_t>(W), 2);
         if (odd) {
           sizes[0] = 1;
           sizes[1] = 3;
         }
         Tensor in = full({2 * W}, 1.0, DType::Float32);
         Tensor out = zeros({sizes[static_cast<size_t>(g.rank())]}, DType::Float32);
         reduce_scatter_v(in, out, sizes, g).wait();
       },
       {"reduce_scatter", "split sizes"}},
      {"reduce_scatter of 2 vs 3 rows per rank",
       [&](Group& g) {
         const int64_t rows = odd ? 3 : 2;
         Tensor in = full({rows * W}, 1.0, DType::Float32);
         Tensor out = zeros({rows}, DType::Float32);
         reduce_scatter(in, out, g).wait();
       },
       {"reduce_scatter", "2 float32", "3 float32"}},
      // reduce always takes MPI_Ireduce.
      {"reduce to root 0 vs 1",
       [&](Group& g) {
         Tensor x = full({16}, 1.0, DType::Float32);
         Tensor out = zeros({16}, DType::Float32);
         reduce(x, out, odd ? 1 : 0, g).wait();
       },
       {"reduce", "to root 0", "to root 1"}},
      {"reduce of 16 vs 17 float32",
       [&](Group& g) {
         Tensor x = full({odd ? 17 : 16}, 1.0, DType::Float32);
         Tensor out = zeros({odd ? 17 : 16}, DType::Float32);
         reduce(x, out, 0, g).wait();
       },
       {"reduce", "16 float32", "17 float32"}},
      {"broadcast of 16 KiB from root 0 vs 1",
       [&](Group& g) {
         Tensor x = full({4096}, 1.0, DType::Float32);
         broadcast(x, odd ? 1 : 0, g).wait();
       },
       {"broadcast", "from root 0", "from root 1"}},
      {"all_gather of 4096 vs 4097 bytes per rank",
       [&](Group& g) {
         const int64_t n = odd ? 4097 : 4096;
         Tensor in = full({n}, 1.0, DType::UInt8);
         Tensor out = zeros({n * W}, DType::UInt8);
         all_gather(in, out, g).wait();
       },
       {"all_gather", "4096 bytes", "4097 bytes"}},
      // gather and scatter always take MPI's non-blocking calls.
      {"gather: the odd ranks send 5 float32 where root 0 expects 4",
       [&](Group& g) {
         Tensor in = full({odd ? 5 : 4}, 1.0, DType::Float32);
         std::vector<Tensor> outs;
         for (int k = 0; k < W; ++k) outs.push_back(zeros({4}, DType::Float32));
         gather(in, outs, 0, g).wait();
       },
       {"gather", "root 0"}},
      {"gather to root 0 vs 1",
       [&](Group& g) {
         Tensor in = full({4}, 1.0, DType::Float32);
         std::vector<Tensor> outs;
         for (int k = 0; k < W; ++k) outs.push_back(zeros({4}, DType::Float32));
         gather(in, outs, odd ? 1 : 0, g).wait();
       },
       {"gather", "to root 0", "to root 1"}},
      {"scatter: the odd ranks expect 5 float32 where root 0 sends 4",
       [&](Group& g) {
         Tensor out = zeros({odd ? 5 : 4}, DType::Float32);
         std::vector<Tensor> ins;
         for (int k = 0; k < W; ++k) ins.push_back(full({4}, 1.0, DType::Float32));
         scatter(ins, out, 0, g).wait();
       },
       {"scatter", "root 0"}},
      // Rank 1 expects one row more from rank 0 than rank 0 sends it.
      {"all_to_all_single with split sizes that do not pair up",
       [&](Group& g) {
         std::vector<int64_t> in_split(static_cast<size_t>(W), 2), out_split(in_split);
         if (g.rank() == 1) out_split[0] = 3;
         int64_t in_rows = 0, out_rows = 0;
         for (int k = 0; k < W; ++k) {
           in_rows += in_split[static_cast<size_t>(k)];
           out_rows += out_split[static_cast<size_t>(k)];
         }
         Tensor in = full({in_rows, 1024}, 1.0, DType::Float32);
         Tensor out = zeros({out_rows, 1024}, DType::Float32);
         all_to_all_single(in, out, out_split, in_split, g).wait();
       },
       {"all_to_all", "do not match"}},
  };
  for (const Case& k : cases) run_case(world, c, k);

  // Past the persistent requests' 64 keys: 70 all_reduce sizes that agree (and sum right),
  // then one that differs.
  {
    Group sub = world.split(0, world.rank());
    for (int64_t n = 1; n <= 70; ++n) {
      Tensor x = full({n}, 1.0, DType::Float32);
      all_reduce(x, sub).wait();
      c.expect(x.get_flat(n - 1) == W, "all_reduce of " + std::to_string(n) + " float32 sums to " +
                                           std::to_string(W));
    }
    run_case(sub, c,
             {"the 71st all_reduce size: 71 vs 72 float32",
              [&](Group& g) {
                Tensor x = full({odd ? 72 : 71}, 1.0, DType::Float32);
                all_reduce(x, g).wait();
              },
              {"71 float32", "72 float32"}});
  }
  // A non-blocking path whose Work is tested, not waited for, until it fails.
  run_case(world, c,
           {"reduce of 16 float32 sum vs max, tested until finished",
            [&](Group& g) {
              Tensor x = full({16}, 1.0, DType::Float32);
              Tensor out = zeros({16}, DType::Float32);
              Work w = reduce(x, out, 0, g, odd ? ReduceOp::Max : ReduceOp::Sum);
              const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
              while (!w.is_completed() && std::chrono::steady_clock::now() < until)
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
              w.wait();
            },
            {"reduce", "(sum)", "(max)"}});

  // The world group is untouched: a collective on it still works, and finalize is clean.
  Tensor flag = full({1}, c.failed == 0 ? 0.0 : 1.0, DType::Int32);
  all_reduce(flag, world, ReduceOp::Max).wait();
  c.expect(flag.get_flat(0) == 0, "every rank passed");
  finalize();
  return c.failed == 0 ? 0 : 1;
}
