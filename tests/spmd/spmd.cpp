#include "tests/spmd/spmd.h"

#include <ferry/ferry.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <unistd.h>

namespace spmd {
namespace {

std::vector<Case>& registry() {
  static std::vector<Case> r;
  return r;
}

std::vector<std::function<std::string(ferry::Group&)>>& final_checks() {
  static std::vector<std::function<std::string(ferry::Group&)>> r;
  return r;
}

bool selected(const Case& c, int argc, char** argv) {
  if (argc <= 1) return true;
  for (int i = 1; i < argc; ++i) {
    const std::string want = argv[i];
    if (c.name.find(want) != std::string::npos || c.tags.find(want) != std::string::npos)
      return true;
  }
  return false;
}

// The verdict of one case: passed on every rank, failed on some rank, or unknown because the
// verdict's own all_reduce failed (a peer died or timed out), in which case the job stops.
enum class Verdict { Passed, Failed, Unknown };

// Runs on the world group, which the caller checked is not poisoned on this rank. A failure of
// the all_reduce itself is reported here rather than escaping main (std::terminate would hide
// which rank and which case).
Verdict all_passed(ferry::Group& world, bool mine, const std::string& what) {
  try {
    ferry::Tensor flag = ferry::full({1}, mine ? 0 : 1, ferry::DType::Int32);
    ferry::all_reduce(flag, world, ferry::ReduceOp::Max).wait();
    return flag.get_flat(0) == 0 ? Verdict::Passed : Verdict::Failed;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[spmd rank %d] the verdict of '%s' could not be agreed: %s\n",
                 world.rank(), what.c_str(), e.what());
    return Verdict::Unknown;
  }
}

}  // namespace

bool add(Case c) {
  registry().push_back(std::move(c));
  return true;
}

bool add_final_check(std::function<std::string(ferry::Group&)> check) {
  final_checks().push_back(std::move(check));
  return true;
}

std::vector<Case> cases() {
  std::vector<Case> sorted = registry();
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const Case& a, const Case& b) { return a.name < b.name; });
  return sorted;
}

int main_under_mpi(int argc, char** argv) {
  if (std::getenv("FERRY_TIMEOUT") == nullptr)
    ferry::set_default_timeout(std::chrono::milliseconds(60'000));
  ferry::Group world;
  try {
    world = ferry::init();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[spmd] ferry::init failed: %s\n", e.what());
    std::fflush(stderr);
    _exit(1);  // no world to finalize; the launcher reports the exit status
  }
  const int me = world.rank();
  const auto t_all = std::chrono::steady_clock::now();
  int ran = 0, failed = 0, skipped = 0;
  bool stopped = false;
  for (const Case& c : cases()) {
    if (!selected(c, argc, argv)) continue;
    ++ran;
    const std::string skip = c.skip_reason ? c.skip_reason(world) : std::string();
    if (!skip.empty()) {
      ++skipped;
      if (me == 0)
        std::printf("[spmd %d ranks] %-8s %6s  %s: %s\n", world.size(), "skipped", "",
                    c.name.c_str(), skip.c_str());
      std::fflush(stdout);
      continue;
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::string error;
    try {
      c.run(world);
    } catch (const std::exception& e) {
      error = e.what();
    } catch (...) {
      error = "an exception not derived from std::exception";
    }
    if (!error.empty())
      std::fprintf(stderr, "[spmd rank %d/%d] FAILED %s: %s\n", me, world.size(), c.name.c_str(),
                   error.c_str());
    if (world.poisoned()) {
      std::fprintf(stderr, "[spmd rank %d] the world group is poisoned after '%s'; stopping\n", me,
                   c.name.c_str());
      ++failed;
      stopped = true;
      break;
    }
    const Verdict verdict = all_passed(world, error.empty(), c.name);
    const bool ok = verdict == Verdict::Passed;
    if (!ok) ++failed;
    if (verdict == Verdict::Unknown) {
      stopped = true;
      break;
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (me == 0)
      std::printf("[spmd %d ranks] %-8s %6.2f s  %s\n", world.size(), ok ? "ok" : "FAILED", s,
                  c.name.c_str());
    std::fflush(stdout);
  }
  for (size_t i = 0; i < final_checks().size() && !stopped; ++i) {
    std::string error;
    try {
      error = final_checks()[i](world);
    } catch (const std::exception& e) {
      error = e.what();
    }
    if (!error.empty())
      std::fprintf(stderr, "[spmd rank %d/%d] FAILED final check %zu: %s\n", me, world.size(), i,
                   error.c_str());
    if (world.poisoned()) {
      ++failed;
      stopped = true;
      break;
    }
    const Verdict verdict = all_passed(world, error.empty(), "final check");
    const bool ok = verdict == Verdict::Passed;
    if (!ok) ++failed;
    if (verdict == Verdict::Unknown) {
      stopped = true;
      break;
    }
    if (me == 0)
      std::printf("[spmd %d ranks] %-8s final check %zu\n", world.size(), ok ? "ok" : "FAILED", i);
  }
  const double total =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_all).count();
  if (me == 0)
    std::printf("[spmd %d ranks] %d cases, %d skipped, %d failed, %.1f s\n", world.size(), ran,
                skipped, failed, total);
  std::fflush(stdout);
  std::fflush(stderr);
  if (ran == 0) {
    std::fprintf(stderr, "[spmd rank %d] no case matched the arguments\n", me);
    failed = 1;
  }
  if (stopped) _exit(1);  // a poisoned group may leave MPI unable to finalize
  try {
    ferry::finalize();
  } catch (const std::exception& e) {
    // finalize's handshake names the ranks that never arrived or ended early.
    std::fprintf(stderr, "[spmd rank %d] ferry::finalize failed: %s\n", me, e.what());
    std::fflush(stderr);
    _exit(1);
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace spmd
