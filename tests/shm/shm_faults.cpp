// The shared-memory path when a peer fails, as separate processes of this host (the test binary
// re-executes itself with "--child NAME", joined by the TCP rendezvous over UCX; mpiexec would
// end the whole job when a rank is killed): a rank SIGKILLed between ops makes every survivor
// raise PeerFailure naming it, well before the deadline; a rank that never issues an op makes
// the others raise TimeoutError at the deadline, naming the op, its sequence number and the
// absent rank; a rank held before its reads while a peer fails its op and writes over its
// buffers raises PeerFailure rather than completing with those bytes; a rank whose caller gives
// up on an op tells its peers through the transport, whether or not they write into its output;
// and after these, /dev/shm holds no segment name, and no shared arena: a survivor unmaps a dead
// peer's arena with the group, and an arena is never named in /dev/shm.
#include <ferry/ferry.h>
#include <ferry/collectives/engine/group_impl.h>
#include <ferry/collectives/shm/shared_segment.h>
#include <ferry/collectives/shm/shm_group.h>
#include "tests/catch/caught_error.h"
#include "tests/catch/run_catch.h"
#include "tools/run/rank_processes.h"

#include <catch2/catch.hpp>

#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

using namespace ferry;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kParamVar = "SHM_FAULTS_VICTIM";

class Checks {
 public:
  explicit Checks(int rank) : rank_(rank) {}
  void expect(bool ok, const std::string& what) {
    ++made_;
    if (ok) return;
    ++failed_;
    std::fprintf(stderr, "[rank %d] CHECK FAILED: %s\n", rank_, what.c_str());
  }
  int status() const { return made_ > 0 && failed_ == 0 ? 0 : 1; }

 private:
  int rank_;
  int made_ = 0, failed_ = 0;
};

using test::capture;
using test::Caught;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The mappings of peers' shared arenas in this process ("/memfd:ferry-arena-<pid>-<n>" of
// another pid): a survivor keeps a dead peer's memory alive only while it maps it.
int peer_arena_mappings() {
  std::ifstream maps("/proc/self/maps");
  const std::string mine = "ferry-arena-" + std::to_string(getpid()) + "-";
  int n = 0;
  for (std::string line; std::getline(maps, line);)
    if (contains(line, "ferry-arena-") && !contains(line, mine)) ++n;
  return n;
}

// The victim (world rank, from the parameter) kills itself after ten shm all_reduces and three
// on tensors in shared memory (which its peers map); the others go on and must fail with
// PeerFailure naming it within a few seconds of a 60 s deadline, and once their group is gone
// they map nothing of the victim's.
int kill_between_ops() {
  Group world = init();
  Checks c(world.rank());
  const int victim = std::atoi(std::getenv(kParamVar));
  std::optional<Group> group(world.split(0, world.rank()));  // dropped before the last check
  Group& g = *group;
  set_algorithm_override("all_reduce:shm,barrier:shm");
  Tensor t = full({2}, 1.0);
  for (int k = 0; k < 10; ++k) {
    t.fill_(1.0);
    all_reduce(t, g).wait();
  }
  c.expect(t.get_flat(0) == g.size(), "the shm all_reduce sums");
  Tensor big = empty_shared({100000});  // above the slots: read where it lies
  for (int k = 0; k < 3; ++k) {
    big.fill_(1.0);
    all_reduce(big, g).wait();
  }
  c.expect(big.get_flat(99999) == g.size(), "the shm all_reduce of shared tensors sums");
  c.expect(peer_arena_mappings() > 0, "the peers' arenas are mapped");
  if (world.rank() == victim) raise(SIGKILL);
  const auto t0 = Clock::now();
  Caught e = capture([&] {
    for (int k = 0; k < 100000; ++k) all_reduce(t, g).wait();  // ends by throwing
  });
  const double took = seconds_since(t0);
  std::fprintf(stderr, "[rank %d] failed after %.3f s with %s: %s\n", world.rank(), took,
               e.kind.c_str(), e.what.c_str());
  c.expect(e.kind == "PeerFailure", "the survivor raises PeerFailure, got " + e.kind);
  c.expect(contains(e.what, "rank " + std::to_string(victim)),
           "the error names the dead rank: " + e.what);
  c.expect(took < 5.0, "the failure comes within 5 s, took " + std::to_string(took));
  const auto t1 = Clock::now();
  Caught later = capture([&] { barrier(g).wait(); });
  c.expect(!later.kind.empty() && seconds_since(t1) < 1.0,
           "a later op on the group fails at once, got '" + later.kind + "'");
  group.reset();
  c.expect(peer_arena_mappings() == 0,
           "no peer arena mapped once the group is gone, found " +
               std::to_string(peer_arena_mappings()));
  std::fflush(stderr);
  _exit(c.status());  // skip finalize: the transport's flush would wait on the dead peer
}

// World rank 1 never issues the third shm all_reduce: rank 0 times out at its 1.5 s deadline.
int skip_an_op() {
  Group world = init();
  Checks c(world.rank());
  Group g = world.split(0, world.rank());
  set_algorithm_override("all_reduce:shm");
  set_default_timeout(std::chrono::milliseconds(1500));
  Tensor t = full({2}, 1.0);
  all_reduce(t, g).wait();
  all_reduce(t, g).wait();
  if (world.rank() == 0) {
    const uint64_t seq = g.sequence_number();
    const auto t0 = Clock::now();
    Caught e = capture([&] { all_reduce(t, g).wait(); });
    const double took = seconds_since(t0);
    c.expect(e.kind == "TimeoutError", "expected TimeoutError, got " + e.kind + ": " + e.what);
    c.expect(took > 1.0 && took < 6.0, "timed out after " + std::to_string(took) + " s");
    c.expect(contains(e.what, "all_reduce") && contains(e.what, "seq " + std::to_string(seq)) &&
                 contains(e.what, "rank(s) 1 did not arrive"),
             "the message names the op, its seq and the absent rank: " + e.what);
    c.expect(g.poisoned(), "the timeout poisons the group");
  } else {
    // It skips the third op: its two all_reduces of 1 on two ranks summed to 2, then 4.
    c.expect(t.get_flat(0) == 4.0 && t.get_flat(1) == 4.0, "rank 1's two ops before the skip");
  }
  set_default_timeout(std::chrono::milliseconds(60000));
  barrier(world).wait();  // the world group is untouched: both end together
  finalize();
  return c.status();
}

// Every rank makes itself non-dumpable before init: where that keeps its peers from reading its
// memory (no CAP_SYS_PTRACE), each rank's probe says so and every rank runs all_to_all_single
// as the pairwise exchange; where it does not (root here), the single copy runs. Either way
// the blocks arrive, and every rank took the same path.
int unreadable() {
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  Group world = init();
  Checks c(world.rank());
  Group g = world.split(0, world.rank());
  set_algorithm_override("all_to_all:shm");
  const int W = g.size(), me = g.rank();
  Tensor in = empty({W * 1000}, DType::Float32);
  for (int q = 0; q < W; ++q) in.narrow(0, q * 1000, 1000).fill_(100 * me + q);
  Tensor out = zeros({W * 1000}, DType::Float32);
  all_to_all_single(in, out, g).wait();
  for (int p = 0; p < W; ++p)
    c.expect(out.get_flat(p * 1000 + 999) == 100 * p + me,
             "the block from rank " + std::to_string(p) + " arrived");
  const bool by_shm = g.impl().runs(Collective::AllToAll, Algorithm::SharedMemory) == 1;
  const bool by_pairwise = g.impl().runs(Collective::AllToAll, Algorithm::Pairwise) == 1;
  c.expect(by_shm != by_pairwise, "one path ran the all_to_all");
  Tensor mine = from_vector<int64_t>({by_shm ? 1 : 0});
  Tensor all = empty({W}, DType::Int64);
  set_algorithm_override("");
  all_gather(mine, all, world).wait();
  for (int p = 0; p < W; ++p)
    c.expect(all.get_flat(p) == mine.get_flat(0), "every rank took the same path");
  std::fprintf(stderr, "[rank %d] non-dumpable: all_to_all_single ran by %s\n", world.rank(),
               by_shm ? "shm (reads allowed here)" : "the pairwise exchange (reads refused)");
  finalize();
  return c.status();
}

// The file world rank 1 creates once it failed its op and wrote over its buffers (the
// `released` scenario's parameter).
std::string g_marker;

// Holds a rank before it reads its peers' buffers, until that file exists (30 s at most).
void wait_for_marker(const char*) {
  for (int k = 0; k < 3000 && access(g_marker.c_str(), F_OK) != 0; ++k) usleep(10'000);
}

// One large op of the kind named on `g` (every rank's block of 8192 float32, above the slots).
void run_large(const std::string& op, Tensor& in, Tensor& out, Group& g) {
  constexpr int64_t kBlock = 8192;
  if (op == "all_gather") all_gather(in.narrow(0, 0, kBlock), out, g).wait();
  if (op == "all_to_all") all_to_all_single(in, out, g).wait();
  if (op == "all_reduce") all_reduce(in, g).wait();
}

// Three ranks run a large all_gather, all_to_all_single and all_reduce on buffers not in
// shared memory. Rank 0 is held before its last reads of peers' buffers; rank 1 meanwhile
// fails its op at its own 1 s deadline (which tells nobody), writes -99 over its input and
// output, as a caller may once its Work failed, and lets rank 0 go: rank 0 reads those bytes,
// and must raise PeerFailure instead of completing; rank 2, waiting for rank 0, raises too.
int released_while_read() {
  Group world = init();
  Checks c(world.rank());
  const std::string base = std::getenv(kParamVar);
  set_algorithm_override("all_gather:shm,all_to_all:shm,all_reduce:shm");
  for (const std::string op : {"all_gather", "all_to_all", "all_reduce"}) {
    Group g = world.split(0, world.rank());
    const int me = g.rank(), W = g.size();
    g_marker = base + "-" + op;
    Tensor in = full({8192 * W}, me + 1.0);
    Tensor out = zeros({8192 * W});
    run_large(op, in, out, g);  // first, every rank in time: the group's probe and a check
    const double expect = op == "all_reduce" ? W * (W + 1) / 2.0 : 2.0;  // rank 1's block
    c.expect((op == "all_reduce" ? in : out).get_flat(8192 + 5) == expect,
             op + " before the failure moves the blocks");
    in.fill_(me + 1.0);
    barrier(world).wait();
    if (me == 0) detail::shm::set_pause_before_reads_for_testing(&wait_for_marker);
    if (me == 1) set_default_timeout(std::chrono::milliseconds(1000));
    Caught e = capture([&] { run_large(op, in, out, g); });
    if (me == 1) {
      in.fill_(-99.0);
      out.fill_(-99.0);
      std::ofstream(g_marker).put('x');
    }
    detail::shm::set_pause_before_reads_for_testing(nullptr);
    set_default_timeout(std::chrono::milliseconds(60000));
    std::fprintf(stderr, "[rank %d] %s: %s: %s\n", me, op.c_str(), e.kind.c_str(),
                 e.what.c_str());
    if (me == 1) c.expect(e.kind == "TimeoutError", op + ": rank 1 times out, got " + e.kind);
    // It names rank 1, or rank 2 where a stall of the whole job (all ranks stopped at once)
    // let rank 1's deadline pass before rank 2 read, which then gave up first.
    const bool names_a_peer = contains(e.what, "rank 1") || contains(e.what, "rank 2");
    if (me == 0)
      c.expect(e.kind == "PeerFailure" && names_a_peer,
               op + ": rank 0 raises PeerFailure rather than completing with rank 1's new "
               "bytes (rank 1's block holds " +
                   std::to_string((op == "all_reduce" ? in : out).get_flat(8192 + 5)) +
                   "), got '" + e.kind + "': " + e.what);
    if (me == 2) c.expect(e.kind == "PeerFailure", op + ": rank 2 raises, got '" + e.kind + "'");
    barrier(world).wait();  // rank 1's buffers stay until rank 0 read them
    if (me == 1) std::remove(g_marker.c_str());
  }
  finalize();
  return c.status();
}

// World rank 0's caller gives up on a large all_reduce (then all_to_all) after 100 ms
// (Work::wait(ms)) that rank 1 has not issued: rank 1 first waits for a message from rank 0 on the group, a receive,
// which never looks at the segment. An op that fails for a reason other than its own deadline
// tells its peers at once, through the transport as well as the segment, whether or not they
// write into its output (the all_reduce's in either placement, the all_to_all's in shared
// memory: its buffers are then kept too). So rank
// 1's receive raises PeerFailure saying that rank 0 gave up on the group (after about 0.1 s;
// its wait is bounded at 20 s, far beyond, so that a loaded machine's pauses of seconds do not
// fail it), and the op it issues next raises PeerFailure rather than completing with a rank
// that let go of it.
int tell_peers() {
  Group world = init();
  Checks c(world.rank());
  set_algorithm_override("all_reduce:shm,all_to_all:shm");
  for (const bool a2a : {false, true}) {
    for (const bool shared : {false, true}) {
      const std::string form = std::string(a2a ? "all_to_all, " : "all_reduce, ") +
                               (shared ? "output in shared memory" : "output not shared");
      Group g = world.split(0, world.rank());
      Tensor t = shared ? empty_shared({100000}) : zeros({100000});  // above the slots
      Tensor out = shared ? empty_shared({100000}) : zeros({100000});
      // The all_reduce in place; the all_to_all from `out` into `t` (50000 floats a rank).
      auto issue = [&] { return a2a ? all_to_all_single(out, t, g) : all_reduce(t, g); };
      t.fill_(1.0);
      out.fill_(2.0);
      const detail::shm::SingleCopyBytes before = detail::shm::single_copy_bytes();
      issue().wait();  // every rank in time: the group's probe, and the writes accepted
      c.expect(t.get_flat(99999) == 2.0, form + ": the op before the failure moves its bytes");
      const detail::shm::SingleCopyBytes after = detail::shm::single_copy_bytes();
      // The all_reduce's peer writes its slice into this rank's output, by mapping where it is
      // shared and else through the kernel; the all_to_all's only where it is shared.
      c.expect((after.written > before.written) == shared,
               form + ": the peer writes by mapping only into an output in shared memory");
      if (!a2a && !shared)
        c.expect(after.written_by_kernel - before.written_by_kernel == 50000 * sizeof(float),
                 form + ": this rank writes its finished slice into the peer's output "
                        "through the kernel");
      t.fill_(1.0);
      if (g.rank() == 0) {
        Work w = issue();
        Caught e = capture([&] { w.wait(std::chrono::milliseconds(100)); });
        c.expect(e.kind == "TimeoutError", form + ": rank 0's caller gives up, got " + e.kind);
        c.expect(g.poisoned(), form + ": giving up poisons the group");
        barrier(world).wait();  // until rank 1 checked what it saw
      } else {
        Tensor msg = zeros({1});
        const auto t0 = Clock::now();
        Caught e = capture([&] { recv(msg, 0, g).wait(std::chrono::milliseconds(20000)); });
        std::fprintf(stderr, "[rank 1] %s: the receive from rank 0 raised after %.3f s %s: %s\n",
                     form.c_str(), seconds_since(t0), e.kind.c_str(), e.what.c_str());
        c.expect(e.kind == "PeerFailure" && contains(e.what, "gave up on group"),
                 form + ": the receive from rank 0 raises PeerFailure saying that it gave "
                        "up, got '" + e.kind + "': " + e.what);
        Caught next = capture([&] { issue().wait(std::chrono::milliseconds(20000)); });
        std::fprintf(stderr, "[rank 1] %s: the next op raised %s: %s\n", form.c_str(),
                     next.kind.c_str(), next.what.c_str());
        c.expect(next.kind == "PeerFailure",
                 form + ": the next op raises PeerFailure, got '" + next.kind + "': " +
                     next.what);
        barrier(world).wait();
      }
    }
  }
  finalize();
  return c.status();
}

// Whether /dev/shm holds a name of a shared arena (it never should: arenas are memory files).
bool arena_names_in_dev_shm() {
  bool found = false;
  if (DIR* dir = opendir("/dev/shm")) {
    while (dirent* e = readdir(dir)) found = found || contains(e->d_name, "ferry-arena");
    closedir(dir);
  }
  return found;
}

std::vector<run::RankExit> launch(const std::string& scenario, int ranks,
                                  const std::string& param) {
  run::LaunchOptions o;
  o.ranks = ranks;
  o.argv = {"/proc/self/exe", "--child", scenario};
  o.env = {{kParamVar, param}, {"FERRY_BACKEND", "ucx"}, {"FERRY_TIMEOUT", "60"}};
  o.timeout = std::chrono::seconds(90);
  o.grace = std::chrono::seconds(20);
  return run::launch_ranks(o);
}

}  // namespace

TEST_CASE("shm: a rank killed between ops makes every survivor raise PeerFailure",
          "[shm][process][failure]") {
  const std::string victim = GENERATE(as<std::string>{}, "2", "0");  // a peer, and the creator
  INFO("victim rank " << victim);
  auto exits = launch("kill", 3, victim);
  for (const auto& e : exits) {
    INFO(run::describe(e));
    if (std::to_string(e.rank) == victim)
      CHECK((!e.exited && e.signal == SIGKILL && !e.killed_by_us));
    else
      CHECK((e.exited && e.status == 0));
  }
  CHECK_FALSE(detail::shm::SharedSegment::names_left_in_dev_shm());
  CHECK_FALSE(arena_names_in_dev_shm());
}

TEST_CASE("shm: all_to_all_single where ranks may not read each other's memory",
          "[shm][process]") {
  auto exits = launch("unreadable", 3, "");
  for (const auto& e : exits) {
    INFO(run::describe(e));
    CHECK((e.exited && e.status == 0));
  }
  CHECK_FALSE(detail::shm::SharedSegment::names_left_in_dev_shm());
}

TEST_CASE("shm: a rank that reads a peer's buffers after that peer failed raises",
          "[shm][process][failure]") {
  const std::string marker = "/tmp/ferry-shm-faults-" + std::to_string(getpid());
  auto exits = launch("released", 3, marker);
  for (const auto& e : exits) {
    INFO(run::describe(e));
    CHECK((e.exited && e.status == 0));
  }
  CHECK_FALSE(detail::shm::SharedSegment::names_left_in_dev_shm());
}

TEST_CASE("shm: a rank whose caller gives up on an op tells its peers through the transport",
          "[shm][process][failure]") {
  auto exits = launch("tell", 2, "");
  for (const auto& e : exits) {
    INFO(run::describe(e));
    CHECK((e.exited && e.status == 0));
  }
  CHECK_FALSE(detail::shm::SharedSegment::names_left_in_dev_shm());
}

TEST_CASE("shm: a rank that never issues an op makes the others time out", "[shm][process]") {
  auto exits = launch("timeout", 2, "");
  for (const auto& e : exits) {
    INFO(run::describe(e));
    CHECK((e.exited && e.status == 0));
  }
  CHECK_FALSE(detail::shm::SharedSegment::names_left_in_dev_shm());
}

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--child") == 0) {
    const std::string name = argv[2];
    try {
      if (name == "kill") return kill_between_ops();
      if (name == "timeout") return skip_an_op();
      if (name == "unreadable") return unreadable();
      if (name == "released") return released_while_read();
      if (name == "tell") return tell_peers();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child scenario '%s' failed: %s\n", name.c_str(), e.what());
      return 1;
    }
    std::fprintf(stderr, "unknown child scenario '%s'\n", name.c_str());
    return 2;
  }
  return ferry_test::run_catch(argc, argv);
}
