// ferry-placement-probe: what a write into memory another core has just read costs here, against
// a write into memory no other core touched.
//
// Why: on some hosts (this project's 2-vCPU machine among them) the cores two ranks run on
// change from hour to hour, and with them the cost of handing cache lines between the ranks: a
// 512 KiB write into lines the other rank just read took 56-58 us on one placement and 224-230 us
// on another, against 6-10 us untouched. Every collective that reuses its buffers pays that
// hand-off, and a local memcpy (ferry-bench's ideal) does not, so runs of ferry-bench are only
// comparable within one placement. Run this before each run of a comparison and split the rows
// by its first figure.
//
// Two processes (this one and a child) on a shared mapping, each pinned to one of two CPUs: the
// child reads buffer X whenever it is its turn; the parent times its write of X right after the
// child read it, and its write of Y, which the child never reads. Each waits for the other's
// turn on a flag (a short spin, then yielding), with a deadline; run it on two idle CPUs.
#include "tools/cli/args.h"

#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kDeadline = std::chrono::seconds(30);  // for the whole probe

struct Options {
  size_t bytes = 512 << 10;
  int iters = 200;
  int cpu_a = -1, cpu_b = -1;  // -1: the first two CPUs this process may run on
};

bool pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof set, &set) == 0;
}

// The first two CPUs of this process's affinity mask, where not given.
bool choose_cpus(Options& o) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return false;
  for (int c = 0; c < CPU_SETSIZE && (o.cpu_a < 0 || o.cpu_b < 0); ++c) {
    if (!CPU_ISSET(c, &set) || c == o.cpu_a) continue;
    (o.cpu_a < 0 ? o.cpu_a : o.cpu_b) = c;
  }
  return o.cpu_a >= 0 && o.cpu_b >= 0 && o.cpu_a != o.cpu_b;
}

// Waits until `turn` holds `want`; false at the deadline. Spins a little (the other side
// answers within microseconds when it has its CPU), then yields at every look, so a CPU shared
// with other work is not held.
bool await(const std::atomic<int>& turn, int want, Clock::time_point deadline) {
  for (int i = 0;; ++i) {
    if (turn.load(std::memory_order_acquire) == want) return true;
    if (i >= 4096) sched_yield();
    if ((i & 1023) == 0 && Clock::now() >= deadline) return false;
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int probe(const Options& o) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* map = mmap(nullptr, page + 2 * o.bytes, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) {
    std::fprintf(stderr, "ferry-placement-probe: mmap of %zu bytes: %s\n", page + 2 * o.bytes,
                 std::strerror(errno));
    return 1;
  }
  auto* turn = new (map) std::atomic<int>(0);
  char* x = static_cast<char*>(map) + page;
  char* y = x + o.bytes;
  std::memset(x, 1, 2 * o.bytes);
  const Clock::time_point deadline = Clock::now() + kDeadline;
  if (!pin(o.cpu_a)) {
    std::fprintf(stderr, "ferry-placement-probe: cannot run on CPU %d\n", o.cpu_a);
    return 1;
  }
  const pid_t child = fork();
  if (child < 0) {
    std::fprintf(stderr, "ferry-placement-probe: fork: %s\n", std::strerror(errno));
    return 1;
  }
  if (child == 0) {  // the reader: every odd turn it reads X a line at a time, then hands back
    if (!pin(o.cpu_b)) _exit(3);
    volatile long sink = 0;
    for (int i = 0; i < o.iters; ++i) {
      if (!await(*turn, 2 * i + 1, deadline)) _exit(4);
      long sum = 0;
      for (size_t k = 0; k < o.bytes; k += 64) sum += x[k];
      sink = sink + sum;
      turn->store(2 * i + 2, std::memory_order_release);
    }
    _exit(0);
  }
  std::vector<double> read_by_other, untouched;
  bool ok = true;
  for (int i = 0; i < o.iters && ok; ++i) {
    const Clock::time_point t0 = Clock::now();
    std::memset(x, i & 0xff, o.bytes);
    const Clock::time_point t1 = Clock::now();
    std::memset(y, i & 0xff, o.bytes);
    const Clock::time_point t2 = Clock::now();
    read_by_other.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    untouched.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
    turn->store(2 * i + 1, std::memory_order_release);
    ok = await(*turn, 2 * i + 2, deadline);
  }
  if (!ok) kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  munmap(map, page + 2 * o.bytes);
  if (!ok || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr,
                 "ferry-placement-probe: the reader on CPU %d did not %s within %lld s (is CPU "
                 "%d busy?)\n",
                 o.cpu_b, WIFEXITED(status) && WEXITSTATUS(status) == 3 ? "start" : "keep pace",
                 static_cast<long long>(kDeadline.count()), o.cpu_b);
    return 1;
  }
  std::printf("write after the other core read it: %.1f us; write of untouched memory: %.1f us "
              "(%zu bytes, CPUs %d and %d, medians of %d)\n",
              median(read_by_other), median(untouched), o.bytes, o.cpu_a, o.cpu_b, o.iters);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::string cpus;
  ferry::cli::Parser parser(
      "ferry-placement-probe", "[options]",
      "Times a write into memory another core has just read, against a write into memory no "
      "other core touched, between two CPUs of this process's mask: how much moving cache lines "
      "between two ranks costs on the cores they run on now.");
  parser
      .option("--bytes", "SIZE", "bytes written each time (default 512K)",
              [&](const std::string& v) {
                o.bytes = ferry::cli::parse_bytes("--bytes", v);
                if (o.bytes < 4096 || o.bytes > (size_t{1} << 30))
                  throw ferry::cli::UsageError("--bytes: expected 4K .. 1G, given " + v);
              })
      .int_option("--iters", "writes of each kind timed (default 200)", &o.iters, 3, 100000)
      .string_option("--cpus", "the two CPUs, A,B (default: the first two this process may use)",
                     &cpus, "A,B")
      .epilog("Prints one line: the two medians. Status 1 when it cannot run (fewer than two "
              "CPUs, the reader stalled for 30 s).\n");
  try {
    parser.parse(argc, argv);
    if (!cpus.empty()) {
      const size_t comma = cpus.find(',');
      if (comma == std::string::npos)
        throw ferry::cli::UsageError("--cpus: expected two CPUs as A,B, given " + cpus);
      o.cpu_a = static_cast<int>(ferry::cli::parse_int("--cpus", cpus.substr(0, comma), 0,
                                                       CPU_SETSIZE - 1));
      o.cpu_b = static_cast<int>(ferry::cli::parse_int("--cpus", cpus.substr(comma + 1), 0,
                                                       CPU_SETSIZE - 1));
      if (o.cpu_a == o.cpu_b)
        throw ferry::cli::UsageError("--cpus: expected two different CPUs, given " + cpus);
    }
  } catch (const ferry::cli::UsageError& e) {
    std::fprintf(stderr, "ferry-placement-probe: %s (see --help)\n", e.what());
    return 2;
  }
  if (!choose_cpus(o)) {
    std::fprintf(stderr, "ferry-placement-probe: needs two CPUs this process may run on\n");
    return 1;
  }
  return probe(o);
}
