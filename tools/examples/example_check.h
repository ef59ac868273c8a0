// What every example shares: its ranks are threads of this process (run_ranks), so each rank
// notes what it found wrong here, and main prints the verdict once and returns non-zero on any.
#pragma once

#include <cmath>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

namespace example {

class Findings {
 public:
  // Notes a mismatch between `got` and `want` (to 1e-9) for rank `rank`.
  void expect_near(int rank, const std::string& what, double got, double want) {
    if (std::fabs(got - want) <= 1e-9 * (1 + std::fabs(want))) return;
    std::lock_guard<std::mutex> lock(mu_);
    wrong_.push_back("rank " + std::to_string(rank) + ": " + what + " is " + std::to_string(got) +
                     ", expected " + std::to_string(want));
  }
  // Prints the verdict; the process's exit status.
  int report(const char* example) {
    for (const std::string& w : wrong_) std::printf("%s: WRONG: %s\n", example, w.c_str());
    std::printf("%s: %s\n", example, wrong_.empty() ? "ok" : "FAILED");
    return wrong_.empty() ? 0 : 1;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> wrong_;
};

}  // namespace example
