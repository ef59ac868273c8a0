#include "tests/ucx/child_scenarios.h"

#include "ferry.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <thread>

namespace ucxtest {
namespace {

using namespace ferry;
using Clock = std::chrono::steady_clock;

// Checks of one rank; the process exits with 1 if any failed or none was made.
class Checks {
 public:
  explicit Checks(int rank) : rank_(rank) {}
  void expect(bool ok, const std::string& what) {
    ++made_;
    if (ok) return;
    ++failed_;
    std::fprintf(stderr, "[rank %d] CHECK FAILED: %s\n", rank_, what.c_str());
  }
  int status() const {
    if (made_ == 0) std::fprintf(stderr, "[rank %d] no check was made\n", rank_);
    return made_ > 0 && failed_ == 0 ? 0 : 1;
  }
  void set_rank(int rank) { rank_ = rank; }

 private:
  int rank_;
  int made_ = 0, failed_ = 0;
};

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string param() {
  const char* v = std::getenv(kParamVar);
  return v == nullptr ? "" : v;
}

// Runs `fn`; returns the exception it threw (what(), kind) or empty strings.
struct Caught {
  std::string kind, what;
};
Caught capture(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const PeerFailure& e) {
    return {"PeerFailure", e.what()};
  } catch (const MismatchError& e) {
    return {"MismatchError", e.what()};
  } catch (const TimeoutError& e) {
    return {"TimeoutError", e.what()};
  } catch (const InvalidArgument& e) {
    return {"InvalidArgument", e.what()};
  } catch (const TransportError& e) {
    return {"TransportError", e.what()};
  } catch (const std::exception& e) {
    return {"other", e.what()};
  }
  return {};
}

// The last rank dies (SIGKILL) while the others are inside a large all_reduce with it. The
// survivors must raise PeerFailure naming it well before the deadline (FERRY_TIMEOUT, set by
// the parent far above the bound checked here), and later ops must fail at once.
int kill_mid_collective() {
  Group g = init();
  Checks c(g.rank());
  const int victim = g.size() - 1;
  const double bound = std::atof(param().c_str());
  Tensor warm = full({1024}, 1.0);
  all_reduce(warm, g).wait();  // every rank is connected and in step
  c.expect(warm.get_flat(0) == g.size(), "the warm-up all_reduce sums");
  Tensor big = full({int64_t{16} << 20}, 1.0);  // 64 MiB: the collective lasts a while
  if (g.rank() == victim) {
    Work w = all_reduce(big, g);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the transfer is under way
    raise(SIGKILL);
  }
  const auto t0 = Clock::now();
  Caught e = capture([&] {
    for (int i = 0; i < 1000; ++i) all_reduce(big, g).wait();  // ends by throwing
  });
  const double took = seconds_since(t0);
  std::fprintf(stderr, "[rank %d] failed after %.2f s with %s: %s\n", g.rank(), took,
               e.kind.c_str(), e.what.c_str());
  c.expect(e.kind == "PeerFailure", "the survivor raises PeerFailure, got " + e.kind);
  c.expect(contains(e.what, "rank " + std::to_string(victim)),
           "the error names the dead rank: " + e.what);
  c.expect(took < bound, "the failure comes within " + std::to_string(bound) + " s, took " +
                             std::to_string(took));
  const auto t1 = Clock::now();
  Caught later = capture([&] { all_reduce(warm, g).wait(); });
  c.expect(!later.kind.empty() && seconds_since(t1) < 1.0,
           "a later op on the group fails at once, got '" + later.kind + "' after " +
               std::to_string(seconds_since(t1)) + " s");
  std::fflush(stderr);
  _exit(c.status());  // skip finalize: its flush would wait on the dead peer's endpoint
}

// Rank 0 gives up on the world group (its all_reduce has a different size, so its receive
// fails with MismatchError). The others must fail with PeerFailure "gave up" long before the
// deadline, not time out.
int abandon() {
  Group g = init();
  Checks c(g.rank());
  const double bound = std::atof(param().c_str());
  Tensor t = full({g.rank() == 0 ? 10 : 20}, 1.0);
  const auto t0 = Clock::now();
  Caught e = capture([&] { all_reduce(t, g).wait(); });
  const double took = seconds_since(t0);
  std::fprintf(stderr, "[rank %d] failed after %.2f s with %s: %s\n", g.rank(), took,
               e.kind.c_str(), e.what.c_str());
  c.expect(e.kind == "MismatchError" || e.kind == "PeerFailure",
           "a mismatch or the peer's giving up, got " + e.kind + ": " + e.what);
  c.expect(e.kind != "PeerFailure" || contains(e.what, "gave up on group 0"),
           "the PeerFailure says who gave up on which group: " + e.what);
  c.expect(took < bound, "within " + std::to_string(bound) + " s, took " + std::to_string(took));
  std::fflush(stderr);
  // The rank that gave up stays a moment: if it ended at once, a peer could notice the process
  // ending before the give-up message (also a PeerFailure, but not the one this tests).
  if (e.kind == "MismatchError") std::this_thread::sleep_for(std::chrono::milliseconds(300));
  _exit(c.status());  // the world group is poisoned; nothing left to finalize cleanly
}

// Point-to-point contract: exact sizes (a receive of another size fails with MismatchError on
// the receiver, naming both sizes), zero-byte messages, the full 31-bit user tag range, and
// messages of one tag matched in posting order.
int p2p_contract() {
  Group g = init();
  Checks c(g.rank());
  const int me = g.rank(), n = g.size();
  const int right = (me + 1) % n, left = (me + n - 1) % n;
  // Zero bytes still match, and a huge user tag is carried intact.
  {
    Tensor none = empty({0});
    Work s = send(none, right, g, 0x7FFFFFFF);
    Caught e = capture([&] { recv(empty({0}), left, g, 0x7FFFFFFF).wait(); });
    s.wait();
    c.expect(e.kind.empty(), "zero-byte send/recv with tag 2^31-1: " + e.what);
  }
  // Posting order within one tag.
  {
    std::vector<Work> sends;
    std::vector<Tensor> outs;
    for (int i = 0; i < 5; ++i) sends.push_back(send(full({3}, 10.0 * me + i), right, g, 5));
    for (int i = 0; i < 5; ++i) outs.push_back(empty({3}));
    for (int i = 0; i < 5; ++i) recv(outs[i], left, g, 5).wait();
    for (auto& w : sends) w.wait();
    for (int i = 0; i < 5; ++i)
      c.expect(outs[i].get_flat(2) == 10.0 * left + i, "message " + std::to_string(i) +
                                                          " of tag 5 arrives in order");
  }
  // Size mismatch: the receiver expects 8 floats, the sender sends 5 (shorter) on tag 9 and 12
  // (longer) on tag 10.
  if (me == 0) {
    Caught shorter = capture([&] { recv(empty({8}), 1, g, 9).wait(); });
    c.expect(shorter.kind == "MismatchError" && contains(shorter.what, "sent 20 bytes") &&
                 contains(shorter.what, "expected 32 bytes"),
             "a shorter message: " + shorter.kind + ": " + shorter.what);
    Caught longer = capture([&] { recv(empty({8}), 1, g, 10).wait(); });
    c.expect(longer.kind == "MismatchError" && contains(longer.what, "expected 32 bytes"),
             "a longer message: " + longer.kind + ": " + longer.what);
  } else if (me == 1) {
    Work a = send(full({5}, 1.0), 0, g, 9);
    Work b = send(full({12}, 1.0), 0, g, 10);
    a.wait();
    b.wait();
    c.expect(true, "the sender's sends complete");
  }
  barrier(g).wait();
  c.expect(!g.poisoned(), "point-to-point errors do not poison the group");
  finalize();
  return c.status();
}

// FERRY_BACKEND=ucx with neither a launcher nor a rendezvous: a clear InvalidArgument.
int no_bootstrap() {
  Checks c(-1);
  Caught e = capture([] { init(); });
  c.expect(e.kind == "InvalidArgument" && contains(e.what, "FERRY_RENDEZVOUS") &&
               contains(e.what, "mpiexec"),
           "init says how to bootstrap UCX, got " + e.kind + ": " + e.what);
  return c.status();
}

}  // namespace

int run_child(const std::string& name) {
  static const std::map<std::string, int (*)()> scenarios = {
      {"kill", kill_mid_collective},
      {"abandon", abandon},
      {"p2p", p2p_contract},
      {"no-bootstrap", no_bootstrap},
  };
  auto it = scenarios.find(name);
  if (it == scenarios.end()) {
    std::fprintf(stderr, "unknown child scenario '%s'\n", name.c_str());
    return 2;
  }
  try {
    return it->second();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "child scenario '%s' failed: %s\n", name.c_str(), e.what());
    return 1;
  }
}

}  // namespace ucxtest
