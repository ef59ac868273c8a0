// A job on simulated hosts (tools/hosts) that loses a host mid-training: the harness kills every
// process of one host, or cuts its link, once rank 0 says the loop runs (HOSTS_FAULT_READY).
// Every rank runs all_reduce after all_reduce, checking each sum, until one fails. Every rank
// the fault did not kill (those of a cut host included: for them the other hosts are lost)
// must then:
//
//  - fail with ferry::PeerFailure or ferry::TimeoutError, nothing else, no abort;
//  - have it name only lost ranks as the cause, and at least one (the ranks of the faulty host;
//    for a rank on a cut host, the ranks of the other hosts);
//  - have it within the deadline (plus an allowance for a loaded machine) of the fault, whose
//    moment is the time of the file HOSTS_FAULT_DONE (made just before it strikes);
//  - finalize (ferry::finalize may return or raise) within its bound as well.
//
// Each such rank prints one line "hosts-faults: rank R ..." with what it saw, and exits 0 when
// every check held, 1 when one did not. Arguments: DEADLINE [FLOATS]: the deadline of every wait
// once the job is up, in seconds (init keeps FERRY_TIMEOUT, so that a slow start on a loaded
// machine is not taken for the fault), and the floats of each all_reduce (default 16384).
#include <ferry/ferry.h>

#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace ferry;
using SysClock = std::chrono::system_clock;

// Allowance over the deadline: a 2-core machine shared with other jobs pauses processes.
constexpr double kAllowanceS = 3.0;
// Iterations before rank 0 asks for the fault.
constexpr int kWarmup = 10;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

double seconds_since(const std::string& file) {
  struct stat st{};
  if (file.empty() || ::stat(file.c_str(), &st) != 0) return -1;
  const auto at = SysClock::time_point(std::chrono::seconds(st.st_mtim.tv_sec) +
                                       std::chrono::nanoseconds(st.st_mtim.tv_nsec));
  return std::chrono::duration<double>(SysClock::now() - at).count();
}

// The ranks the error blames: those a TimeoutError says "did not answer" ("rank 2 did not
// answer", "ranks 2, 3 did not answer"), and the one a PeerFailure says failed ("rank 2 of the
// ucx world failed", also when it comes second hand: "world rank 1 gave up on group 0 after:
// ... rank 2 of the ucx world failed"; "send to rank 2 ... failed: rank 2 is unreachable";
// "rank 2 ended before it reached ..."). A rank named otherwise (the caller's place "rank 1/4",
// the group's members, a neighbour it was "waiting for data from" that waits as well, the
// rank that passed the news on) is not blamed.
std::set<int> blamed_ranks(const std::string& message) {
  std::set<int> out;
  const std::regex patterns[] = {std::regex(R"(\branks? ((?:\d+, )*\d+) did not answer)"),
                                 std::regex(R"(\brank (\d+) of the \w+ world failed)"),
                                 std::regex(R"(\brank (\d+) is unreachable)"),
                                 std::regex(R"(\brank (\d+) ended before it reached)")};
  const std::regex number(R"(\d+)");
  for (const std::regex& pattern : patterns) {
    for (std::sregex_iterator it(message.begin(), message.end(), pattern), end; it != end; ++it) {
      const std::string numbers = (*it)[1];
      for (std::sregex_iterator n(numbers.begin(), numbers.end(), number); n != end; ++n)
        out.insert(std::stoi(n->str()));
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const double deadline_s = argc > 1 ? std::atof(argv[1]) : 0;
  const int64_t n = argc > 2 ? std::atoll(argv[2]) : 16384;
  std::vector<int> layout;
  {
    std::istringstream in(env("HOSTS_LAYOUT"));
    for (int v; in >> v;) layout.push_back(v);
  }
  std::istringstream fault_in(env("HOSTS_FAULT"));
  std::string fault;
  int fault_host = -1;
  fault_in >> fault >> fault_host;
  const int my_host = std::atoi(env("HOSTS_HOST").c_str());
  if (layout.empty() || fault.empty() || fault_host < 0 || deadline_s <= 0 || n < 1) {
    std::fprintf(stderr, "hosts-faults: usage: hosts_faults DEADLINE_S [FLOATS], under "
                 "tools/hosts with --kill H or --cut H\n");
    return 2;
  }

  Group world;
  try {
    world = init();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hosts-faults: init failed before the fault: %s\n", e.what());
    return 1;
  }
  set_default_timeout(std::chrono::milliseconds(static_cast<int64_t>(deadline_s * 1000)));
  const int W = world.size(), me = world.rank();
  // The ranks this rank loses: the faulty host's, or, on a cut host, every other host's.
  std::set<int> lost;
  for (int h = 0, r = 0; h < static_cast<int>(layout.size()); ++h) {
    for (int l = 0; l < layout[static_cast<size_t>(h)]; ++l, ++r) {
      const bool cut_off = fault == "cut" && my_host == fault_host ? h != fault_host
                                                                   : h == fault_host;
      if (cut_off) lost.insert(r);
    }
  }

  Tensor x = empty({n}, DType::Float32);
  std::string kind = "none", message;
  int64_t done = 0;
  const auto started = SysClock::now();
  try {
    for (;; ++done) {
      for (int64_t i = 0; i < n; ++i) x.data<float>()[i] = static_cast<float>(me + 1);
      all_reduce(x, world).wait();
      const float want = static_cast<float>(W * (W + 1) / 2);
      if (x.data<float>()[0] != want || x.data<float>()[n - 1] != want) {
        std::fprintf(stderr, "hosts-faults: rank %d: wrong sum at iteration %lld\n", me,
                     static_cast<long long>(done));
        return 1;
      }
      if (done == kWarmup && me == 0) std::ofstream(env("HOSTS_FAULT_READY")).flush();
      // No fault after all: a bound of its own, so that this never loops forever.
      if (std::chrono::duration<double>(SysClock::now() - started).count() >
          4 * deadline_s + 60) {
        std::fprintf(stderr, "hosts-faults: rank %d: no error %lld iterations on\n", me,
                     static_cast<long long>(done));
        return 1;
      }
    }
  } catch (const TimeoutError& e) {
    kind = "TimeoutError", message = e.what();
  } catch (const PeerFailure& e) {
    kind = "PeerFailure", message = e.what();
  } catch (const std::exception& e) {
    kind = "another exception", message = e.what();
  }
  const double after_fault = seconds_since(env("HOSTS_FAULT_DONE"));
  const std::set<int> blamed = blamed_ranks(message);
  bool ok = true;
  std::string why;
  auto expect = [&](bool holds, const std::string& what) {
    if (!holds) ok = false, why += " [FAILED: " + what + "]";
  };
  expect(kind == "PeerFailure" || kind == "TimeoutError", "PeerFailure or TimeoutError");
  expect(!blamed.empty(), "the error names a rank");
  for (int r : blamed)
    expect(lost.count(r) == 1, "rank " + std::to_string(r) + " it names is not a lost rank");
  expect(after_fault >= 0, "the fault struck before the error (HOSTS_FAULT_DONE exists)");
  expect(after_fault <= deadline_s + kAllowanceS,
         "the error within the deadline and the allowance");

  const auto finalize_start = SysClock::now();
  std::string finalize_said = "returned";
  try {
    finalize();
  } catch (const std::exception& e) {
    finalize_said = std::string("raised ") + e.what();
  }
  const double finalize_s =
      std::chrono::duration<double>(SysClock::now() - finalize_start).count();
  expect(finalize_s <= deadline_s + kAllowanceS, "finalize within its bound");
  std::string named;
  for (int r : blamed) named += " " + std::to_string(r);
  std::printf("hosts-faults: rank %d (host %d): %s %.2f s after the fault, %lld iterations, "
              "blaming ranks%s; finalize %s in %.2f s: %s%s\n  %s\n",
              me, my_host, kind.c_str(), after_fault, static_cast<long long>(done), named.c_str(),
              finalize_said.substr(0, 8).c_str(), finalize_s, ok ? "ok" : "FAILED", why.c_str(),
              message.c_str());
  std::fflush(stdout);
  return ok ? 0 : 1;
}
