// No silent hang under MPI: a rank that skips a collective, or that passes bad input and so
// never issues it, makes every other rank fail with TimeoutError within FERRY_TIMEOUT (1.5 s
// here), naming the op, its sequence number and the absent rank, and saying the job must end;
// the group is poisoned and later calls fail at once. Ranks that pass different sizes get a
// MismatchError rather than wrong bytes. A send MPI cannot withdraw keeps its buffer.
//
// Run as its own mpiexec job (mpiexec -n 2|3 test_timeout_mpi): a timed-out MPI collective can
// never be completed, so the communicators are left behind and the job ends with
// ferry::finalize() (exit status 0 when every check passed on every rank).
#include <ferry/ferry.h>
#include <ferry/runtime/log_sink.h>
#include "job_checks.h"

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

namespace {

using namespace ferry;
using ftest_mpi::Checks;
using ftest_mpi::every_rank_passed;
using std::chrono::milliseconds;

constexpr milliseconds kDeadline{1500};
constexpr int kDoneTag = 7;

std::string kind_of(const std::exception_ptr& e) {
  if (!e) return "no exception";
  try {
    std::rethrow_exception(e);
  } catch (const TimeoutError&) {
    return "TimeoutError";
  } catch (const InvalidArgument&) {
    return "InvalidArgument";
  } catch (const MismatchError&) {
    return "MismatchError";
  } catch (const PeerFailure&) {
    return "PeerFailure";
  } catch (const Error&) {
    return "another ferry::Error";
  } catch (...) {
    return "a non-ferry exception";
  }
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// On a rank that issued the all_reduce the absent rank never joined.
void expect_timeout(Checks& c, Group& g, Work& work, uint64_t seq, int absent,
                    const std::string& scenario) {
  const auto t0 = std::chrono::steady_clock::now();
  std::exception_ptr e;
  try {
    work.wait();
  } catch (...) {
    e = std::current_exception();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string msg = e ? error_message(e) : "";
  const std::string w = scenario + " on rank " + std::to_string(g.rank()) + ": ";
  c.expect(kind_of(e) == "TimeoutError", w + "expected TimeoutError, got " + kind_of(e) + ": " + msg);
  c.expect(s >= 0.5 * kDeadline.count() / 1000.0 && s < kDeadline.count() / 1000.0 + 10.0,
           w + "timed out after " + std::to_string(s) + " s");
  c.expect(contains(msg, "all_reduce"), w + "the message names the op: " + msg);
  c.expect(contains(msg, "seq " + std::to_string(seq)), w + "the message names seq " + std::to_string(seq) + ": " + msg);
  c.expect(contains(msg, "rank " + std::to_string(absent) + " did not answer"),
           w + "the message names absent rank " + std::to_string(absent) + ": " + msg);
  // An op of MPI's own strands its communicator; one in shared memory (ranks on one host: the
  // table's shm) strands nothing, and its message says whom it waited for there instead.
  c.expect(contains(msg, "job must end") || contains(msg, "did not arrive in shared memory"),
           w + "the message says the job must end (or whom shared memory waited for): " + msg);
  c.expect(g.poisoned(), w + "the timeout poisons the group");
  const auto t1 = std::chrono::steady_clock::now();
  std::exception_ptr later;
  try {
    barrier(g).wait();
  } catch (...) {
    later = std::current_exception();
  }
  const double s1 = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  c.expect(later != nullptr && kind_of(later) != "a non-ferry exception",
           w + "a call on the poisoned group throws a ferry::Error, got " + kind_of(later));
  c.expect(s1 < 0.5, w + "the call on the poisoned group took " + std::to_string(s1) + " s");
}

// The absent rank stays alive, outside the collective, until every other rank is done with it
// (it is late, not dead), then checks its own view.
void wait_for_the_others(Checks& c, Group& control, int me, const std::string& scenario) {
  for (int k = 0; k < control.size(); ++k) {
    if (k == me) continue;
    Tensor done = zeros({1});
    recv(done, k, control, kDoneTag).wait(milliseconds(30'000));
    c.expect(done.get_flat(0) == 1.0, scenario + ": rank " + std::to_string(k) + " reported done");
  }
}

void tell_absent_rank(Group& control, int absent) {
  send(ones({1}), absent, control, kDoneTag).wait(milliseconds(30'000));
}

}  // namespace

int main() {
  set_default_timeout(kDeadline);
  Group world = init();
  const int me = world.rank(), W = world.size();
  // One group per scenario (each is poisoned by it) and one that stays healthy for the
  // hand-shakes and the verdict.
  Group control = world.split(0, me);
  Group skip_group = world.split(0, me);
  Group skip_large_group = world.split(0, me);
  Group bad_group = world.split(0, me);
  Checks c;

  // A rank skips the collective: a small all_reduce (a persistent MPI request) and a 64 KiB one
  // (rounds of point-to-point messages, backends/mpi/mpi_exchange.h).
  for (const auto& [group, elements] : {std::pair{&skip_group, 16}, std::pair{&skip_large_group, 16384}}) {
    const std::string scenario = "rank " + std::to_string(W - 1) + " skips all_reduce of " +
                                 std::to_string(elements) + " floats";
    for (int i = 0; i < 2; ++i) barrier(*group).wait();  // a sequence number other than 0
    if (me == W - 1) {
      wait_for_the_others(c, control, me, scenario);
      c.expect(!group->poisoned(), scenario + ": the absent rank's group is not poisoned");
    } else {
      Tensor t = ones({elements});
      const uint64_t seq = group->sequence_number();
      Work work = all_reduce(t, *group);
      expect_timeout(c, *group, work, seq, W - 1, scenario);
      tell_absent_rank(control, W - 1);
    }
  }
  {  // Rank 0 passes bad input: it fails at once, the others time out waiting for it.
    const std::string scenario = "rank 0 passes a mismatched output dtype";
    barrier(bad_group).wait();
    if (me == 0) {
      const auto t0 = std::chrono::steady_clock::now();
      std::exception_ptr e;
      try {
        (void)all_reduce(zeros({8}), zeros({8}, DType::Float64), bad_group);
      } catch (...) {
        e = std::current_exception();
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      c.expect(kind_of(e) == "InvalidArgument", scenario + ": expected InvalidArgument, got " + kind_of(e));
      c.expect(s < 0.25, scenario + ": InvalidArgument took " + std::to_string(s) + " s");
      c.expect(!bad_group.poisoned(), scenario + ": the rejecting rank keeps a usable group");
      wait_for_the_others(c, control, me, scenario);
    } else {
      Tensor in = ones({8}), out = zeros({8});
      const uint64_t seq = bad_group.sequence_number();
      Work work = all_reduce(in, out, bad_group);
      expect_timeout(c, bad_group, work, seq, 0, scenario);
      tell_absent_rank(control, 0);
    }
  }

  {  // Ranks pass different sizes to an all_gather (the point-to-point path of 2-4 ranks, and
     // MPI_Iallgather beyond): every rank fails with a clear error instead of moving wrong
     // bytes, from the key check that runs beside the op (mpi_call_key.h), whatever the op
     // itself did (a truncation on one rank only).
    const std::string scenario = "ranks pass different all_gather sizes";
    Group mismatch_group = world.split(0, me);
    const int64_t block = 1000 + 200 * me;
    Tensor in = ones({block}), out = zeros({block * W});
    std::exception_ptr e;
    try {
      all_gather(in, out, mismatch_group).wait();
    } catch (...) {
      e = std::current_exception();
    }
    const std::string msg = e ? error_message(e) : "";
    const std::string w = scenario + " on rank " + std::to_string(me) + ": ";
    c.expect(kind_of(e) == "MismatchError", w + "expected MismatchError, got " + kind_of(e) + ": " + msg);
    c.expect(contains(msg, "called different collectives") &&
                 contains(msg, std::to_string(block * 4) + " bytes"),
             w + "the message says why: " + msg);
    c.expect(mismatch_group.poisoned() == (e != nullptr), w + "a failed op poisons the group");
  }

  {  // A rank skips an all_to_all_single run as the pairwise exchange over MPI's point-to-point
     // messages, with 1 MiB blocks (sent by rendezvous: a send stays posted until the peer
     // takes it). MPICH cannot withdraw a send, and would read its buffer whenever the absent
     // rank took the message: the others keep their buffers for the rest of the process, and a
     // WARN line says so, instead of letting the input be freed and reused under MPI.
    const std::string scenario = "rank " + std::to_string(W - 1) +
                                 " skips a pairwise all_to_all_single of 1 MiB blocks";
    set_algorithm_override("all_to_all:pairwise");
    Group a2a_group = world.split(0, me);
    if (me == W - 1) {
      wait_for_the_others(c, control, me, scenario);
    } else {
      std::mutex mu;
      std::string kept_line;
      detail::set_log_observer([&](LogLevel level, const char*, const std::string& text) {
        std::lock_guard<std::mutex> lock(mu);
        if (level == LogLevel::Warn && contains(text, "could not be withdrawn")) kept_line = text;
      });
      const int64_t block = 256 * 1024;  // floats: 1 MiB
      Tensor in = ones({block * W}), out = zeros({block * W});
      std::exception_ptr e;
      {
        Work work = all_to_all_single(in, out, a2a_group);
        try {
          work.wait();
        } catch (...) {
          e = std::current_exception();
        }
      }
      detail::set_log_observer(nullptr);
      const std::string w = scenario + " on rank " + std::to_string(me) + ": ";
      c.expect(kind_of(e) == "TimeoutError",
               w + "expected TimeoutError, got " + kind_of(e) + ": " + (e ? error_message(e) : ""));
      c.expect(contains(kept_line, "a send") && contains(kept_line, "kept"),
               w + "a WARN line says a send could not be withdrawn and its buffers are kept: '" +
                   kept_line + "'");
      // Kept: a handle besides ours lives on (for the rest of the process).
      c.expect(!in.owns_storage_alone(), w + "the input MPI may still read is kept");
      tell_absent_rank(control, W - 1);
    }
    set_algorithm_override("");
  }

  bool ok = every_rank_passed(c, control, "timeout");

  // The last rank skips the first of two identical all_reduces: its one call matches the
  // others' first, so no op can tell. When it enters finalize the others, waiting in the
  // second, fail at once with PeerFailure naming it; finalize's handshake then compares how many
  // collectives each rank issued on every group, and the skipping rank, told nothing so far,
  // gets MismatchError naming both counts. The others' finalize is clean: their group failed
  // (they raised there), and the earlier scenarios' groups failed on the ranks that issued more.
  // A far deadline: the others must fail because the last rank entered finalize, at once, not
  // at their deadline (which would be a TimeoutError, and no count check on the last rank).
  set_default_timeout(std::chrono::seconds(30));
  Group skip_first_group = world.split(0, me);
  const uint64_t first_seq = skip_first_group.sequence_number();
  const auto t0 = std::chrono::steady_clock::now();
  Tensor t = ones({4});
  if (me != W - 1) all_reduce(t, skip_first_group).wait();
  std::string waiting = "none";
  try {
    all_reduce(t, skip_first_group).wait();
  } catch (...) {
    waiting = kind_of(std::current_exception());
  }
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (waited > 10.0) {
    std::fprintf(stderr, "rank %d: the skip scenario took %.1f s (expected well under the 30 s "
                 "deadline)\n", me, waited);
    ok = false;
  }
  if (me == W - 1 ? waiting != "none" : waiting != "PeerFailure") {
    std::fprintf(stderr, "rank %d: all_reduce after a skip: got %s\n", me, waiting.c_str());
    ok = false;
  }
  std::string closing;
  std::string kind = "none";
  try {
    finalize();
  } catch (...) {
    closing = error_message(std::current_exception());
    kind = kind_of(std::current_exception());
  }
  const std::string counts = "rank " + std::to_string(W - 1) + " issued " +
                             std::to_string(first_seq + 1) + ", rank ";
  const bool named = contains(closing, "did not issue the same collectives") &&
                     contains(closing, counts) &&
                     contains(closing, "issued " + std::to_string(first_seq + 2));
  if (me == W - 1 ? kind != "MismatchError" || !named : kind != "none") {
    std::fprintf(stderr, "rank %d: finalize after a skipped all_reduce: expected %s, got %s: %s\n",
                 me, me == W - 1 ? "MismatchError naming the counts" : "no error", kind.c_str(),
                 closing.c_str());
    ok = false;
  }
  return ok ? 0 : 1;
}
