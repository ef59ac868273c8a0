// Checks of the standalone mpiexec jobs (timeout_main.cpp, progress_main.cpp): each rank records
// its own, and the job passes only when every rank's passed.
#pragma once

#include <ferry/ferry.h>

#include <cstdio>
#include <string>
#include <vector>

namespace ftest_mpi {

struct Checks {
  int made = 0;
  std::vector<std::string> failed;
  void expect(bool ok, const std::string& what) {
    ++made;
    if (!ok) failed.push_back(what);
  }
};

// Prints this rank's failures, agrees over `group` whether every rank passed (and checked
// something), prints the verdict on its rank 0 as "[<job> <W> ranks] ok|FAILED".
inline bool every_rank_passed(const Checks& c, ferry::Group& group, const char* job) {
  for (const std::string& f : c.failed)
    std::fprintf(stderr, "[%s rank %d] FAILED %s\n", job, group.rank(), f.c_str());
  ferry::Tensor flag =
      ferry::full({1}, c.failed.empty() && c.made > 0 ? 0 : 1, ferry::DType::Int32);
  ferry::all_reduce(flag, group, ferry::ReduceOp::Max).wait();
  const bool ok = flag.get_flat(0) == 0;
  if (group.rank() == 0)
    std::printf("[%s %d ranks] %s (%d checks on rank 0)\n", job, group.size(),
                ok ? "ok" : "FAILED", c.made);
  std::fflush(stdout);
  std::fflush(stderr);
  return ok;
}

}  // namespace ftest_mpi
