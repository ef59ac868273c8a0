#include "tests/ucx/child_scenarios.h"

#include <ferry/backends/ucx/ucx_cma.h>
#include <ferry/ferry.h>
#include "tests/catch/caught_error.h"
#include "tests/ucx/cma_probe.h"

#include <arpa/inet.h>
#include <linux/capability.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
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

using test::capture;
using test::Caught;

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
    c.expect(a.is_completed() && b.is_completed(), "the sender's sends complete");
  }
  barrier(g).wait();
  c.expect(!g.poisoned(), "point-to-point errors do not poison the group");
  finalize();
  return c.status();
}

// Makes this process's memory unreadable to its peers, and their memory to it, the way a
// hardened host or a container does: no core dumps (a non-dumpable process may only be read
// with CAP_SYS_PTRACE) and no CAP_SYS_PTRACE (tests may run as root, which has it).
void refuse_memory_reads() {
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capget, &header, data) != 0) return;
  data[CAP_SYS_PTRACE / 32].effective &= ~(1u << (CAP_SYS_PTRACE % 32));
  syscall(SYS_capset, &header, data);
}

// Large collectives and point-to-point messages between ranks on this host, checked element by
// element, and the path that carried them (the parameter): "cma" (the receivers read the
// senders' memory, ucx_cma.h), "off" (FERRY_UCX_CMA=0: no descriptor is sent) or "fallback"
// (reads are refused here, so the data comes through UCX after all).
int cma_paths() {
  const std::string expect = param();
  if (expect == "fallback") refuse_memory_reads();
  Group g = init();
  Checks c(g.rank());
  const int me = g.rank(), n = g.size();
  const int64_t m = int64_t{1} << 18;  // 1 MiB of floats per block
  // Every element of `t` in [from, from + count) against want(i); says where the first differs.
  auto all_equal = [](const Tensor& t, int64_t from, int64_t count,
                      const std::function<double(int64_t)>& want, std::string& where) {
    for (int64_t i = from; i < from + count; ++i) {
      if (t.get_flat(i) != want(i)) {
        where = "element " + std::to_string(i) + " is " + std::to_string(t.get_flat(i)) +
                ", expected " + std::to_string(want(i));
        return false;
      }
    }
    return true;
  };
  std::string where;
  // all_reduce (ring: blocks of m * n / n floats), values that differ per element.
  {
    Tensor x = arange(static_cast<int64_t>(n) * m);
    for (int64_t i : {int64_t{0}, m + 7, n * m - 1}) x.set_flat(i, x.get_flat(i) + me);
    all_reduce(x, g).wait();
    const double ranks = n * (n - 1) / 2.0;
    auto want = [&](int64_t i) {
      const bool bumped = i == 0 || i == m + 7 || i == n * m - 1;
      return n * static_cast<double>(i) + (bumped ? ranks : 0);
    };
    c.expect(all_equal(x, 0, n * m, want, where), "all_reduce: " + where);
  }
  // all_gather, reduce_scatter, all_to_all_single: block k of the result comes from rank k.
  {
    Tensor in = full({m}, 10.0 + me), out = empty({n * m});
    all_gather(in, out, g).wait();
    for (int k = 0; k < n; ++k)
      c.expect(all_equal(out, k * m, m, [&](int64_t) { return 10.0 + k; }, where),
               "all_gather block " + std::to_string(k) + ": " + where);
    Tensor rs_in = full({n * m}, 1.0 + me), rs_out = empty({m});
    reduce_scatter(rs_in, rs_out, g).wait();
    c.expect(all_equal(rs_out, 0, m, [&](int64_t) { return n * (n + 1) / 2.0; }, where),
             "reduce_scatter sums: " + where);
    Tensor a_in = empty({n * m}), a_out = empty({n * m});
    for (int64_t i = 0; i < n * m; ++i) a_in.set_flat(i, 100.0 * me + static_cast<double>(i / m));
    all_to_all_single(a_in, a_out, g).wait();
    for (int k = 0; k < n; ++k)
      c.expect(all_equal(a_out, k * m, m, [&](int64_t) { return 100.0 * k + me; }, where),
               "all_to_all block " + std::to_string(k) + ": " + where);
  }
  // Point to point on one tag, around a ring of the ranks (every rank sends large messages
  // through UCX whichever way the table carries the collectives above: on one host it takes
  // shared memory for most of them): large, small, large are matched in posting order, and a
  // large receive accepts the data whichever way it was sent.
  if (n >= 2) {
    const int to = (me + 1) % n, from = (me + n - 1) % n;
    const int64_t sizes[] = {m, 3, 2 * m};
    std::vector<Tensor> outs;
    std::vector<Work> sends;
    for (int i = 0; i < 3; ++i) outs.push_back(empty({sizes[i]}));
    std::vector<Work> recvs;
    for (int i = 0; i < 3; ++i) recvs.push_back(recv(outs[i], from, g, 77));
    for (int i = 0; i < 3; ++i) sends.push_back(send(full({sizes[i]}, 1000.0 * me + i), to, g, 77));
    for (auto& w : sends) w.wait();
    for (auto& w : recvs) w.wait();
    for (int i = 0; i < 3; ++i)
      c.expect(all_equal(outs[i], 0, sizes[i], [&](int64_t) { return 1000.0 * from + i; }, where),
               "point-to-point message " + std::to_string(i) + " of tag 77 in order: " + where);
  }
  barrier(g).wait();
  const detail::CmaCounters& k = detail::cma_counters();
  const uint64_t sent = k.descriptors_sent.load(), reads = k.reads.load(),
                 fallbacks = k.fallbacks.load();
  std::fprintf(stderr, "[rank %d] CMA: %llu descriptors sent, %llu reads (%llu bytes), %llu "
               "fallbacks\n", me, static_cast<unsigned long long>(sent),
               static_cast<unsigned long long>(reads),
               static_cast<unsigned long long>(k.bytes_read.load()),
               static_cast<unsigned long long>(fallbacks));
  // This host may refuse reads between sibling processes (Yama ptrace_scope=1, a container
  // without CAP_SYS_PTRACE): ask the way the transport does, by reading the peers' tokens.
  const int unreadable = ucxtest::cma_unreadable_peers(g);
  std::fprintf(stderr, "[rank %d] %d of %d peers' memory unreadable here\n", me, unreadable,
               n - 1);
  // The first large message from each unreadable peer falls back; its sender then stops
  // offering CMA to this rank.
  const bool fell_back_per_peer =
      fallbacks >= 1 && fallbacks <= static_cast<uint64_t>(unreadable);
  if (expect == "cma") {
    if (unreadable == 0) {
      c.expect(sent > 0 && reads > 0 && fallbacks == 0, "large messages went by CMA");
    } else {
      c.expect(sent > 0 && fell_back_per_peer && (unreadable < n - 1 || reads == 0),
               "large messages took the CMA protocol; reads refused here fell back to UCX");
    }
  } else if (expect == "off") {
    c.expect(sent == 0 && reads == 0, "FERRY_UCX_CMA=0: no CMA at all");
  } else if (expect == "fallback") {
    c.expect(unreadable == n - 1, "the probe finds every peer unreadable");
    c.expect(reads == 0 && fell_back_per_peer, "refused reads fell back to UCX once per peer");
  } else {
    c.expect(false, "unknown expectation '" + expect + "'");
  }
  finalize();
  return c.status();
}

// A large message whose size differs from its receive's: both ranks raise MismatchError naming
// both sizes, in time, and nobody hangs (through UCX, without CMA, only the receiver fails).
// Rank 1 sends 2 MiB on tag 5 (rank 0 expects 1 MiB), then 1 MiB on tags 6, 7, 8 and 9, where
// rank 0 expects 400, 32 (exactly a descriptor), 16 and 0 bytes: receives smaller than a CMA
// descriptor must still decode it and answer, or the sender would wait until its deadline.
int cma_mismatch() {
  Group g = init();
  Checks c(g.rank());
  const int me = g.rank();
  const double bound = std::atof(param().c_str());
  const auto t0 = Clock::now();
  if (me == 0) {
    Caught shorter = capture([&] { recv(empty({int64_t{1} << 18}), 1, g, 5).wait(); });
    c.expect(shorter.kind == "MismatchError" && contains(shorter.what, "sent 2097152 bytes") &&
                 contains(shorter.what, "expected 1048576 bytes"),
             "a large message to a smaller large receive: " + shorter.kind + ": " + shorter.what);
    for (int64_t floats : {100, 8, 4, 0}) {
      const int tag = floats == 100 ? 6 : floats == 8 ? 7 : floats == 4 ? 8 : 9;
      const std::string expected = "expected " + std::to_string(4 * floats) + " bytes";
      Caught tiny = capture([&] { recv(empty({floats}), 1, g, tag).wait(); });
      c.expect(tiny.kind == "MismatchError" && contains(tiny.what, "sent 1048576 bytes") &&
                   contains(tiny.what, expected),
               "a large message to a receive of " + std::to_string(4 * floats) +
                   " bytes: " + tiny.kind + ": " + tiny.what);
    }
  } else if (me == 1) {
    Caught longer = capture([&] { send(full({int64_t{1} << 19}, 1.0), 0, g, 5).wait(); });
    c.expect(longer.kind == "MismatchError" && contains(longer.what, "sent 2097152 bytes") &&
                 contains(longer.what, "expected 1048576 bytes"),
             "the sender of the larger message fails too: " + longer.kind + ": " + longer.what);
    for (int64_t floats : {100, 8, 4, 0}) {
      const int tag = floats == 100 ? 6 : floats == 8 ? 7 : floats == 4 ? 8 : 9;
      const std::string expected = "expected " + std::to_string(4 * floats) + " bytes";
      const auto t1 = Clock::now();
      Caught to_tiny = capture([&] { send(full({int64_t{1} << 18}, 1.0), 0, g, tag).wait(); });
      c.expect(to_tiny.kind == "MismatchError" && contains(to_tiny.what, "sent 1048576 bytes") &&
                   contains(to_tiny.what, expected),
               "the sender to the receive of " + std::to_string(4 * floats) +
                   " bytes fails too, after " + std::to_string(seconds_since(t1)) + " s: " +
                   to_tiny.kind + ": " + to_tiny.what);
    }
  }
  c.expect(seconds_since(t0) < bound, "point-to-point mismatches within " +
                                          std::to_string(bound) + " s");
  barrier(g).wait();
  c.expect(!g.poisoned(), "point-to-point errors do not poison the group");
  finalize();
  return c.status();
}

// A large send whose deadline expired before its receive was posted, to a receiver that may
// not read the sender's memory: when the receive comes, it answers the descriptor with Fallback,
// and the withdrawn sender must tell it that no data will come (a zero-byte payload), so that
// the receiver raises PeerFailure naming it at once instead of waiting until its own deadline.
// Rank 1's send has a 1 s deadline; rank 0 receives 2.5 s after the start.
int cma_withdrawn_send() {
  refuse_memory_reads();
  Group g = init();
  Checks c(g.rank());
  const int me = g.rank();
  const double bound = std::atof(param().c_str());
  Group side = g.split(0, me);  // rank 1 waits here, progressing, after g is poisoned
  barrier(g).wait();
  const auto t0 = Clock::now();
  const int64_t m = int64_t{1} << 18;  // 1 MiB of floats
  if (me == 1) {
    set_default_timeout(std::chrono::milliseconds(1000));
    Caught e = capture([&] { send(full({m}, 1.0), 0, g, 3).wait(); });
    set_default_timeout(std::chrono::milliseconds(60'000));
    c.expect(e.kind == "TimeoutError", "the send's deadline expires: " + e.kind + ": " + e.what);
  } else if (me == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    const auto t1 = Clock::now();
    Caught e = capture([&] { recv(empty({m}), 1, g, 3).wait(); });
    const double took = seconds_since(t1);
    std::fprintf(stderr, "[rank 0] the receive failed after %.2f s with %s: %s\n", took,
                 e.kind.c_str(), e.what.c_str());
    c.expect(e.kind == "PeerFailure" && contains(e.what, "rank 1") &&
                 contains(e.what, "withdrew"),
             "the receive learns that the sender withdrew: " + e.kind + ": " + e.what);
    c.expect(took < bound, "within " + std::to_string(bound) + " s, took " + std::to_string(took));
  }
  barrier(side).wait();
  c.expect(seconds_since(t0) < 2 * bound, "the ranks meet again in time");
  std::fflush(stderr);
  _exit(c.status());  // g is poisoned on both ranks
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

// The launcher's rendezvous socket: rank 0 (only) inherits it, listening on FERRY_RENDEZVOUS's
// port before any rank has started, so that no other process can take the port (this rank's
// own UCX worker binds ports before the rendezvous); the job then meets through it.
int rendezvous_handoff() {
  const int rank = std::atoi(std::getenv("FERRY_RANK"));
  Checks c(rank);
  const char* fd_text = std::getenv("FERRY_RENDEZVOUS_FD");
  const std::string address = std::getenv("FERRY_RENDEZVOUS");
  const int port = std::atoi(address.substr(address.rfind(':') + 1).c_str());
  if (rank == 0) {
    const int fd = fd_text != nullptr && *fd_text != '\0' ? std::atoi(fd_text) : -1;
    int listening = 0;
    socklen_t len = sizeof listening;
    c.expect(fd >= 0 && getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 &&
                 listening == 1,
             "rank 0 inherits a listening socket (FERRY_RENDEZVOUS_FD)");
    sockaddr_in a{};
    len = sizeof a;
    c.expect(fd >= 0 && getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0 &&
                 ntohs(a.sin_port) == port,
             "the inherited socket is on FERRY_RENDEZVOUS's port " + std::to_string(port));
    // Another socket cannot have the port meanwhile.
    const int other = socket(AF_INET, SOCK_STREAM, 0);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    const bool bound = bind(other, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    c.expect(!bound && errno == EADDRINUSE, "the rendezvous port is taken before init");
    close(other);
  } else {
    c.expect(fd_text == nullptr || *fd_text == '\0', "only rank 0 gets FERRY_RENDEZVOUS_FD");
  }
  Group g = init();
  Tensor t = full({4}, 1.0);
  all_reduce(t, g).wait();
  c.expect(t.get_flat(3) == g.size(), "the job met through the inherited socket");
  return c.status();
}

// FERRY_RENDEZVOUS_FD naming something that is not a listening socket: rank 0's init says so.
int rendezvous_bad_fd() {
  const int rank = std::atoi(std::getenv("FERRY_RANK"));
  Checks c(rank);
  if (rank != 0) {
    // Waits for rank 0, which fails: a short deadline ends the wait.
    Caught e = capture([] { init(); });
    c.expect(!e.kind.empty(), "rank 1 cannot meet rank 0");
    return c.status();
  }
  Caught e = capture([] { init(); });
  c.expect(e.kind == "InvalidArgument" && contains(e.what, "FERRY_RENDEZVOUS_FD=0") &&
               contains(e.what, "expected a listening socket"),
           "rank 0's init names FERRY_RENDEZVOUS_FD, got " + e.kind + ": " + e.what);
  return c.status();
}

}  // namespace

int run_child(const std::string& name) {
  static const std::map<std::string, int (*)()> scenarios = {
      {"kill", kill_mid_collective},
      {"abandon", abandon},
      {"p2p", p2p_contract},
      {"no-bootstrap", no_bootstrap},
      {"rendezvous-handoff", rendezvous_handoff},
      {"rendezvous-bad-fd", rendezvous_bad_fd},
      {"cma", cma_paths},
      {"cma-mismatch", cma_mismatch},
      {"cma-withdrawn-send", cma_withdrawn_send},
      {"last-message", last_message},
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
