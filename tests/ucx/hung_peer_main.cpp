// A rank that hangs (SIGSTOP) in the middle of an all_reduce: every survivor must fail at its
// deadline (FERRY_TIMEOUT, plus half a second of allowance for a loaded machine), name the stopped
// rank and no other as silent, and then finalize without aborting (finalize may return or
// raise) within a bound. Run under a launcher, as one job, on the UCX transport (or FERRY_BACKEND=mpi):
//
//   FERRY_BACKEND=ucx FERRY_TIMEOUT=2 ferry-run -n 8 hung_peer_main [--keep-stopped] [victim [floats]]
//   FERRY_BACKEND=ucx FERRY_TIMEOUT=2 mpiexec -n 8 hung_peer_main [--keep-stopped] [victim [floats]]
//
// The victim (default: the last rank) forks a small watcher before it stops itself, and every
// rank learns the watcher's pid. Each survivor, once it has its error, marks the failed op's
// buffer, signals the watcher, checks for half a second that the mark stays (nothing the
// resumed victim still sends may land there), and finalizes; the watcher (sleeping in poll and
// sigtimedwait, with a cap) resumes the victim with SIGCONT once every survivor signalled or
// ended, so that nothing is left stopped and the victim cannot wake under a survivor that is
// still waiting for its error. With --keep-stopped the survivors finalize while the victim is
// still stopped (and check that it is) and signal the watcher only afterwards: under mpiexec
// this is the case MPI_Finalize cannot end by itself (on the MPI transport the victim is then
// killed rather than resumed, see watch_then_end's caller). The resumed victim finalizes under
// mpiexec (its launcher then sees every rank end on purpose) and otherwise just exits with
// status 0. hung_peer_check.sh runs the --keep-stopped jobs and checks every survivor's lines.
// Each survivor prints "hung-peer: rank R error ..." and "... finalize ..." lines with its
// figures; the exit status is 0 when every check passed.
#include <ferry/ferry.h>

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace ferry;
using Clock = std::chrono::steady_clock;

// How long the watcher waits for the survivors before it resumes the victim anyway: beyond
// any deadline a test sets, well inside a launcher's own timeout.
constexpr int kWatcherCapMs = 90'000;
// How long survivors watch their failed op's buffer once the victim runs again.
constexpr int kResumedSendsMs = 500;

std::string kind_of(const std::exception_ptr& e) {
  if (!e) return "none";
  try {
    std::rethrow_exception(e);
  } catch (const TimeoutError&) {
    return "TimeoutError";
  } catch (const PeerFailure&) {
    return "PeerFailure";
  } catch (const MismatchError&) {
    return "MismatchError";
  } catch (const TransportError&) {
    return "TransportError";
  } catch (const Error&) {
    return "Error";
  } catch (...) {
    return "other";
  }
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// The ranks a TimeoutError names in "rank R did not answer" / "ranks A, B did not answer".
std::vector<int> silent_ranks(const std::string& msg) {
  const size_t end = msg.find(" did not answer");
  if (end == std::string::npos) return {};
  const size_t start = msg.rfind("rank", end);
  if (start == std::string::npos) return {};
  std::vector<int> ranks;
  const std::string list = msg.substr(start, end - start);
  for (size_t i = 0; i < list.size();) {
    if (list[i] < '0' || list[i] > '9') {
      ++i;
      continue;
    }
    size_t used = 0;
    ranks.push_back(std::stoi(list.substr(i), &used));
    i += used;
  }
  return ranks;
}

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double deadline_seconds() {
  const char* v = std::getenv("FERRY_TIMEOUT");
  return v == nullptr ? 0 : std::atof(v);
}

// The longest this process went unscheduled while it runs: a thread that sleeps 5 ms at a
// time measures how much longer its sleeps took. A machine that pauses the job (others' work
// on shared cores) delays every rank's error by that much, which is not ferry's lateness.
class PauseMeter {
 public:
  PauseMeter() : thread_([this] { run(); }) {}
  ~PauseMeter() {
    stop_.store(true);
    thread_.join();
  }
  double longest_seconds() const { return longest_us_.load() / 1e6; }

 private:
  void run() {
    constexpr auto kTick = std::chrono::milliseconds(5);
    while (!stop_.load()) {
      const auto t = Clock::now();
      std::this_thread::sleep_for(kTick);
      const auto over = std::chrono::duration_cast<std::chrono::microseconds>(
          Clock::now() - t - kTick);
      if (over.count() > longest_us_.load()) longest_us_.store(over.count());
    }
  }
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> longest_us_{0};
  std::thread thread_;
};

// Survivors tell the watcher that they reached finalize with this (queued, so none is lost).
int ready_signal() { return SIGRTMIN; }

// In the child of a fork (async-signal-safe calls only): until every survivor said that it
// reached finalize (ready_signal, blocked here so that it queues) or ended (its pidfd), or the
// cap, then send `victim` `end_signal` (SIGCONT, or SIGKILL) and write `said` to stderr. Sleeps
// in poll and sigtimedwait, never spins.
[[noreturn]] void watch_then_end(pid_t victim, const std::vector<pid_t>& survivors,
                                 int end_signal, const std::string& said) {
  std::vector<pollfd> fds;
  std::vector<bool> done(survivors.size(), false);
  for (pid_t pid : survivors) {
    const int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
    fds.push_back(pollfd{fd, POLLIN, 0});
  }
  sigset_t ready;
  sigemptyset(&ready);
  sigaddset(&ready, ready_signal());
  const auto start = Clock::now();
  for (;;) {
    size_t left = 0;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) != 0) done[i] = true;
      fds[i].revents = 0;
      left += done[i] ? 0 : 1;
    }
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    if (left == 0 || waited.count() >= kWatcherCapMs) break;
    (void)poll(fds.data(), fds.size(), 100);
    const timespec none{0, 0};
    siginfo_t info{};
    while (sigtimedwait(&ready, &info, &none) > 0) {
      for (size_t i = 0; i < survivors.size(); ++i)
        if (survivors[i] == info.si_pid) done[i] = true;
    }
  }
  kill(victim, end_signal);
  (void)!write(2, said.data(), said.size());
  _exit(0);
}

// The state letter of /proc/<pid>/stat ('T' when stopped), or '?'.
char process_state(pid_t pid) {
  FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
  if (f == nullptr) return '?';
  char line[512] = {};
  const size_t n = std::fread(line, 1, sizeof(line) - 1, f);
  std::fclose(f);
  // "pid (comm) S ...": the command may hold spaces and parentheses, the last ')' ends it.
  const std::string text(line, n);
  const size_t close = text.rfind(')');
  return close == std::string::npos || close + 2 >= text.size() ? '?' : text[close + 2];
}

int run(int argc, char** argv) {
  bool keep_stopped = false;
  std::vector<char*> positional;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--keep-stopped")
      keep_stopped = true;
    else
      positional.push_back(argv[i]);
  }
  // The world is held in an optional so that it goes before finalize: finalize then ends the
  // transport itself (its endpoints and worker), as it does in a program that kept no group.
  std::optional<Group> world(init());
  Group& g = *world;
  const int n = g.size(), me = g.rank();
  const int victim = !positional.empty() ? std::atoi(positional[0]) : n - 1;
  if (n < 2 || victim < 0 || victim >= n) {
    std::fprintf(stderr, "hung-peer: needs 2+ ranks and a victim in [0, %d), given %d\n", n,
                 victim);
    return 2;
  }
  // Every rank's pid, for the victim's watcher (all ranks run on this host).
  Tensor pids = zeros({n}, DType::Int64);
  pids.set_flat(me, static_cast<double>(getpid()));
  all_reduce(pids, g).wait();  // also: every rank is connected and in step

  // 32 KiB per rank and step of a ring: UCX's rendezvous, below ferry's CMA protocol (64 KiB),
  // so that a survivor holds transfers with the stopped rank that UCX itself must let go of.
  // A second argument sets another number of floats.
  const int64_t elements = positional.size() > 1 ? std::atoll(positional[1]) : int64_t{8192} * n;
  Tensor big = full({elements}, 1.0);
  // The victim forks its watcher, whose pid every survivor learns (a second exchange).
  pid_t watcher = 0;
  if (me == victim) {
    std::vector<pid_t> survivors;
    for (int r = 0; r < n; ++r)
      if (r != me) survivors.push_back(static_cast<pid_t>(pids.get_flat(r)));
    sigset_t ready, old;
    sigemptyset(&ready);
    sigaddset(&ready, ready_signal());
    pthread_sigmask(SIG_BLOCK, &ready, &old);  // the child inherits the mask: signals queue
    const pid_t self = getpid();
    // On the MPI transport a victim resumed after the survivors ended makes MPICH's own UCX
    // read from their gone processes, and MPICH aborts it (a fatal error in its CMA transport,
    // not ferry's doing): with --keep-stopped it is killed instead, which tells the same (the
    // survivors did not need it) without a core dump. mpiexec then reports that rank's signal,
    // which hung_peer_check.sh accepts for the victim only.
    const bool kill_it = keep_stopped && backend_name() == "mpi";
    const int end_signal = kill_it ? SIGKILL : SIGCONT;
    const std::string said = "hung-peer: watcher: victim rank " + std::to_string(me) + " pid " +
                             std::to_string(self) + (kill_it ? " killed" : " resumed") + "\n";
    watcher = fork();
    if (watcher == 0) watch_then_end(self, survivors, end_signal, said);
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
  }
  Tensor watcher_pid = zeros({1}, DType::Int64);
  watcher_pid.set_flat(0, static_cast<double>(watcher));
  all_reduce(watcher_pid, g).wait();
  watcher = static_cast<pid_t>(watcher_pid.get_flat(0));
  if (me == victim) {
    Work w = all_reduce(big, g);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // its messages are under way
    raise(SIGSTOP);
    // Its threads run again: whatever it still had under way goes out now, while the survivors
    // watch their buffers (kResumedSendsMs).
    std::this_thread::sleep_for(std::chrono::milliseconds(kResumedSendsMs / 2));
    // Resumed once every survivor reached finalize (with --keep-stopped: ended it). Under
    // mpiexec this rank finalizes too, so that mpiexec sees every rank end on purpose; under
    // ferry-run it just ends.
    if (std::getenv("PMI_RANK") != nullptr) {
      try {
        world.reset();
        big = Tensor();
        w = Work();
        finalize();
      } catch (...) {
      }
    }
    std::fflush(stderr);
    _exit(0);
  }

  const double deadline = deadline_seconds();
  // The diagnosis runs inside the deadline, and so does withdrawing the op's requests (a
  // transfer a live peer left half done is cut off at the deadline), so the error is due at it.
  // The margin covers scheduling and the endpoint's forced close; a pause of the whole process
  // (PauseMeter) is added to it.
  const double late = 0.5;
  // finalize after the timeout: nothing in it waits for the stopped rank (a notice to it is
  // given up 50 ms after the last one to a live peer left), so it is prompt (0.00-0.14 s
  // measured); a second would mean a wait for the stopped rank. Plus any pause of the process.
  const double fin_allowance = 0.9;
  // The victim stops right after it posted its all_reduce; it may still have done its part of
  // it (a small op between few ranks can end within microseconds). The survivors then time out
  // in the next one, which the victim never issues.
  std::optional<PauseMeter> pauses(std::in_place);
  auto t0 = Clock::now();
  std::exception_ptr error;
  for (int attempt = 0; attempt < 2 && !error; ++attempt) {
    t0 = Clock::now();
    try {
      all_reduce(big, g).wait();
    } catch (...) {
      error = std::current_exception();
    }
  }
  const double took = since(t0);
  const double paused = pauses->longest_seconds();
  pauses.reset();
  const std::string msg = error ? error_message(error) : "";
  int failed = 0;
  auto expect = [&](bool ok, const std::string& what) {
    if (ok) return;
    ++failed;
    std::fprintf(stderr, "hung-peer: rank %d CHECK FAILED: %s\n", me, what.c_str());
  };
  const std::string kind = kind_of(error);
  // Printed before finalize, so that the figures survive a finalize that goes wrong.
  std::fprintf(stderr, "hung-peer: rank %d error %s after %.2f s (longest pause %.2f s); "
               "message: %s\n", me, kind.c_str(), took, paused, msg.c_str());
  std::fflush(stderr);
  expect(kind == "TimeoutError", "a TimeoutError, got " + kind + ": " + msg);
  expect(deadline <= 0 || took <= deadline + late + paused,
         "the error at the deadline of " + std::to_string(deadline) + " s (plus " +
             std::to_string(late) + " s and the longest pause of the process, " +
             std::to_string(paused) + " s), took " + std::to_string(took) + " s");
  // Exactly the stopped rank is named silent: every survivor times out in step and answers the
  // others' diagnosis. On UCX the diagnosis travels on a side channel of its own, since the
  // stopped rank may have been stopped in the middle of appending to a survivor's shared
  // memory queue, which then holds everything later behind it (ucx_transport.cpp).
  expect(contains(msg, "all_reduce") && contains(msg, "timed out"),
         "the error says which op timed out: " + msg);
  const std::vector<int> silent = silent_ranks(msg);
  expect(silent == std::vector<int>{victim},
         "the error names the stopped rank " + std::to_string(victim) + " and no other as "
         "silent: " + msg);
  union sigval nothing{};
  if (!keep_stopped) {
    // The failed op must have let go of `big`: nothing UCX still held may land in it once the
    // stopped rank runs again. The buffer is marked, the victim resumed (the signal below, once
    // every survivor sent it), and the mark checked after the victim had a while to send.
    constexpr double kMark = -7.0;
    big.fill_(kMark);
    (void)sigqueue(watcher, ready_signal(), nothing);  // this survivor reached finalize
    std::this_thread::sleep_for(std::chrono::milliseconds(kResumedSendsMs));
    int64_t changed = 0;
    for (int64_t i = 0; i < big.numel(); ++i) changed += big.get_flat(i) != kMark ? 1 : 0;
    expect(changed == 0, "no byte lands in the failed op's buffer after it returned, but " +
                             std::to_string(changed) + " elements changed");
  }
  const pid_t victim_pid = static_cast<pid_t>(pids.get_flat(victim));
  pids = Tensor();
  pauses.emplace();
  const auto t1 = Clock::now();
  std::exception_ptr fin;
  big = Tensor();
  world.reset();
  try {
    finalize();
  } catch (...) {
    fin = std::current_exception();
  }
  const double fin_took = since(t1);
  const double fin_paused = pauses->longest_seconds();
  pauses.reset();
  std::fprintf(stderr, "hung-peer: rank %d finalize %s after %.2f s%s%s\n", me,
               fin ? ("raised " + kind_of(fin)).c_str() : "returned", fin_took,
               fin ? ": " : "", fin ? error_message(fin).c_str() : "");

  if (keep_stopped) {
    // The victim runs again only once this survivor's finalize ended (the watcher waits for
    // the signal): finalize must not have needed it.
    const char state = process_state(victim_pid);
    expect(state == 'T', std::string("the victim was still stopped when finalize ended, its "
                                     "state is '") + state + "'");
    (void)sigqueue(watcher, ready_signal(), nothing);
  }
  const double fin_bound = fin_allowance + fin_paused;
  expect(fin_took < fin_bound, "finalize ends within " + std::to_string(fin_allowance) +
                                   " s plus the longest pause of the process (" +
                                   std::to_string(fin_paused) + " s), took " +
                                   std::to_string(fin_took) + " s");
  std::fflush(stderr);
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hung-peer: unexpected exception: %s\n", e.what());
    return 3;
  }
}
