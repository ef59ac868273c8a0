// One short ferry job, the way a user's program starts and ends: ferry::init(), a few
// collectives, ferry::finalize(). tools/stress runs it many times in a row, on many ranks, to
// show that a job's start and end are collective and safe (no rank fails because a peer ended
// first), and the lifecycle-* meson tests run each scenario once per transport.
//
//   lifecycle_job short           one collective of each size class (8 B, 4 KiB, 256 KiB: the
//                                 last takes UCX's CMA path) whose results are checked, then
//                                 finalize right after the last one completed on this rank
//   lifecycle_job drop-work       issues collectives, drops their Works without waiting, then
//                                 finalizes: finalize completes them (a clean end, exit 0)
//   lifecycle_job exit-after-init init() and return from main at once (finalize runs at exit)
//   lifecycle_job early-return    rank 1 returns from main right after init() (finalize runs at
//                                 exit) while the others all_reduce: they fail with PeerFailure
//                                 naming rank 1 within seconds, not at FERRY_TIMEOUT, and every
//                                 rank ends
//   lifecycle_job mismatch-native (MPI's default mode) the ranks call a small collective with
//                                 different counts, dtypes, reductions or roots, each on a
//                                 sub-group of its own: every rank gets MismatchError naming
//                                 both calls, none a wrong result
//   lifecycle_job mismatch        ranks pass different all_gather sizes on a sub-group: every
//                                 rank gets a ferry error (MismatchError or PeerFailure) instead
//                                 of an abort, and the job still ends cleanly
//   lifecycle_job skip            the last rank skips the first of two identical all_reduces on
//                                 the world: no op can tell (its one call is the others' first),
//                                 the others fail in the second with PeerFailure naming it once
//                                 it finalizes, and its finalize raises MismatchError naming
//                                 both counts; every finalize returns or raises (run with and
//                                 without FERRY_CHECK=1)
//
// Exit status 0 when this rank's checks passed. Launch with mpiexec (FERRY_BACKEND=mpi or ucx)
// or with ferry-run (UCX through the TCP rendezvous).
#include <ferry/ferry.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <vector>

namespace {

using namespace ferry;

struct Checks {
  int rank = -1;
  int failed = 0;
  void expect(bool ok, const std::string& what) {
    if (ok) return;
    ++failed;
    std::fprintf(stderr, "[lifecycle rank %d] FAILED %s\n", rank, what.c_str());
  }
};

// Every rank's input holds rank + 1 in every element, so a sum holds W (W + 1) / 2.
int short_job() {
  Group world = init();
  Checks c{world.rank()};
  const int W = world.size();
  const double sum = W * (W + 1) / 2.0;
  for (int64_t elements : {int64_t{2}, int64_t{1024}, int64_t{64 * 1024}}) {
    Tensor x = full({elements}, world.rank() + 1.0, DType::Float32);
    all_reduce(x, world).wait();
    c.expect(x.get_flat(0) == sum && x.get_flat(elements - 1) == sum,
             "all_reduce of " + std::to_string(elements * 4) + " B sums to " +
                 std::to_string(sum) + ", got " + std::to_string(x.get_flat(0)));
  }
  // The last op: an all_gather, whose messages go to every peer at once; the job ends right
  // after this rank's part completed, while peers may still be taking theirs.
  Tensor mine = full({64 * 1024}, world.rank() + 1.0, DType::Float32);
  Tensor all = zeros({64 * 1024 * W}, DType::Float32);
  all_gather(mine, all, world).wait();
  for (int r = 0; r < W; ++r)
    c.expect(all.get_flat(int64_t{r} * 64 * 1024) == r + 1.0,
             "all_gather block " + std::to_string(r) + " holds " + std::to_string(r + 1));
  finalize();
  return c.failed == 0 ? 0 : 1;
}

int drop_work() {
  Group world = init();
  for (int64_t elements : {int64_t{2}, int64_t{64 * 1024}}) {
    Tensor x = full({elements}, 1.0, DType::Float32);
    (void)all_reduce(x, world);  // dropped: the tensor and the op stay alive until it ends
  }
  Tensor mine = full({64 * 1024}, 1.0, DType::Float32);
  Tensor all = zeros({64 * 1024 * world.size()}, DType::Float32);
  (void)all_gather(mine, all, world);
  finalize();
  return 0;
}

int exit_after_init() {
  (void)init();
  return 0;  // finalize() runs at exit
}

int early_return() {
  Group world = init();
  if (world.rank() == 1) return 0;  // finalize() runs at exit
  Checks c{world.rank()};
  Tensor x = full({100}, 1.0, DType::Float32);
  std::string kind = "none", what;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    all_reduce(x, world).wait();
  } catch (const PeerFailure& e) {
    kind = "PeerFailure";
    what = e.what();
  } catch (const std::exception& e) {
    kind = "other";
    what = e.what();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "[lifecycle rank %d] %s after %.3f s: %s\n", world.rank(), kind.c_str(),
               seconds, what.c_str());
  c.expect(kind == "PeerFailure", "an all_reduce without rank 1 fails with PeerFailure, got '" +
                                      kind + "': " + what);
  c.expect(what.find("rank 1 ") != std::string::npos, "the error names rank 1: " + what);
  c.expect(seconds < 10.0, "the error comes within 10 s (FERRY_TIMEOUT is 30 s), not after " +
                               std::to_string(seconds) + " s");
  return c.failed == 0 ? 0 : 1;  // finalize() runs at exit, the world group failed
}

int mismatch_native() {
  Group world = init();
  Checks c{world.rank()};
  const bool odd = world.rank() % 2 == 1;
  struct Case {
    const char* what;
    std::function<void(Group&)> call;
    std::vector<std::string> named;  // what the message must say
  };
  const std::vector<Case> cases = {
      {"all_reduce of 100 vs 101 float32",
       [&](Group& g) {
         Tensor x = full({odd ? 101 : 100}, 1.0, DType::Float32);
         all_reduce(x, g).wait();
       },
       {"100 float32", "101 float32"}},
      {"all_reduce of float32 vs int32",
       [&](Group& g) {
         Tensor x = full({16}, 1.0, odd ? DType::Int32 : DType::Float32);
         all_reduce(x, g).wait();
       },
       {"16 float32", "16 int32"}},
      {"all_reduce sum vs max",
       [&](Group& g) {
         Tensor x = full({16}, 1.0, DType::Float32);
         all_reduce(x, g, odd ? ReduceOp::Max : ReduceOp::Sum).wait();
       },
       {"(sum)", "(max)"}},
      {"broadcast from root 0 vs 1",
       [&](Group& g) {
         Tensor x = full({16}, 1.0, DType::Float32);
         broadcast(x, odd ? 1 : 0, g).wait();
       },
       {"root 0", "root 1"}},
  };
  for (const Case& k : cases) {
    Group sub = world.split(0, world.rank());  // a failed op poisons its group: one each
    std::string kind = "none", what;
    try {
      k.call(sub);
    } catch (const MismatchError& e) {
      kind = "MismatchError";
      what = e.what();
    } catch (const std::exception& e) {
      kind = "other";
      what = e.what();
    }
    c.expect(kind == "MismatchError", std::string(k.what) + ": MismatchError expected, got '" +
                                          kind + "': " + what);
    for (const std::string& n : k.named)
      c.expect(what.find(n) != std::string::npos,
               std::string(k.what) + ": the message names '" + n + "': " + what);
  }
  // The world group is untouched: a collective on it still works, and finalize is clean.
  Tensor flag = full({1}, c.failed == 0 ? 0.0 : 1.0, DType::Int32);
  all_reduce(flag, world, ReduceOp::Max).wait();
  c.expect(flag.get_flat(0) == 0, "every rank passed");
  finalize();
  return c.failed == 0 ? 0 : 1;
}

int mismatch() {
  Group world = init();
  Checks c{world.rank()};
  Group sub = world.split(0, world.rank());
  const int64_t block = 1000 + 200 * world.rank();
  Tensor in = full({block}, 1.0, DType::Float32);
  Tensor out = zeros({block * world.size()}, DType::Float32);
  std::string kind, what;
  try {
    all_gather(in, out, sub).wait();
  } catch (const MismatchError& e) {
    kind = "MismatchError";
    what = e.what();
  } catch (const PeerFailure& e) {
    kind = "PeerFailure";
    what = e.what();
  } catch (const std::exception& e) {
    kind = "other";
    what = e.what();
  }
  // The rank whose receive was too short or too long knows the sizes differ; a peer that only
  // learns that another rank gave up reports PeerFailure quoting it.
  c.expect(kind == "MismatchError" || kind == "PeerFailure",
           "different all_gather sizes give MismatchError or PeerFailure, got '" + kind + "': " +
               what);
  c.expect(sub.poisoned(), "the failed op poisons its group");
  // The world group is untouched: a collective on it still works, and finalize is clean.
  Tensor flag = full({1}, c.failed == 0 ? 0.0 : 1.0, DType::Int32);
  all_reduce(flag, world, ReduceOp::Max).wait();
  c.expect(flag.get_flat(0) == 0, "every rank passed");
  finalize();
  return c.failed == 0 ? 0 : 1;
}

int skip() {
  Group world = init();
  Checks c{world.rank()};
  const int W = world.size(), me = world.rank();
  const bool skipper = me == W - 1;
  const auto t0 = std::chrono::steady_clock::now();
  Tensor x = full({4}, me + 1.0, DType::Float32);
  if (!skipper) all_reduce(x, world).wait();
  std::string kind = "none", what;
  try {
    all_reduce(x, world).wait();
  } catch (const PeerFailure& e) {
    kind = "PeerFailure";
    what = e.what();
  } catch (const std::exception& e) {
    kind = "other";
    what = e.what();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (skipper) {
    c.expect(kind == "none", "the skipping rank's one all_reduce pairs with the others' first, "
                             "got '" + kind + "': " + what);
  } else {
    const bool named = what.find("rank " + std::to_string(W - 1)) != std::string::npos;
    c.expect(kind == "PeerFailure" && named,
             "the others' second all_reduce fails with PeerFailure naming rank " +
                 std::to_string(W - 1) + ", got '" + kind + "': " + what);
    c.expect(seconds < 10.0, "at once when the skipping rank finalizes (FERRY_TIMEOUT is 30 s), "
                             "not after " + std::to_string(seconds) + " s");
  }
  x = Tensor();
  world = Group();
  std::string closing = "none";
  const auto t1 = std::chrono::steady_clock::now();
  try {
    finalize();
  } catch (const MismatchError& e) {
    closing = std::string("MismatchError: ") + e.what();
  } catch (const std::exception& e) {
    closing = std::string("other: ") + e.what();
  }
  const double fin =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  std::fprintf(stderr, "[lifecycle rank %d] skip: all_reduce %s after %.3f s; finalize %s after "
               "%.3f s\n", me, kind.c_str(), seconds, closing.c_str(), fin);
  if (skipper) {
    const std::string counts = "rank " + std::to_string(me) + " issued 1, rank ";
    c.expect(closing.rfind("MismatchError", 0) == 0 &&
                 closing.find("did not issue the same collectives") != std::string::npos &&
                 closing.find(counts) != std::string::npos,
             "the skipping rank's finalize raises MismatchError naming both counts, got " +
                 closing);
  } else {
    c.expect(closing == "none", "the others' finalize is clean, got " + closing);
  }
  c.expect(fin < 10.0, "finalize ends within 10 s, took " + std::to_string(fin) + " s");
  return c.failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  try {
    if (scenario == "short") return short_job();
    if (scenario == "drop-work") return drop_work();
    if (scenario == "exit-after-init") return exit_after_init();
    if (scenario == "mismatch") return mismatch();
    if (scenario == "early-return") return early_return();
    if (scenario == "mismatch-native") return mismatch_native();
    if (scenario == "skip") return skip();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[lifecycle] scenario '%s' failed: %s\n", scenario.c_str(), e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: lifecycle_job short|drop-work|exit-after-init|mismatch|mismatch-native|early-return|skip\n");
  return 2;
}
