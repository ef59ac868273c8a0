// Linked into the SPMD collective suite run over UCX with CMA from 1 KiB
// (collectives-ucx-cma-1k-3): after the cases, every rank checks that its large messages took
// ferry's CMA protocol, read from the peers' memory where this host lets it read them and
// through UCX after a fallback where not, and that the laid-out receives with wide pieces
// (the layout suite's wide column blocks) were read straight into their layouts.
#include <ferry/backends/ucx/ucx_cma.h>
#include "tests/spmd/spmd.h"
#include "tests/ucx/cma_probe.h"

#include <cstdio>
#include <string>

namespace {

std::string check_cma_counters(ferry::Group& world) {
  const int unreadable = ucxtest::cma_unreadable_peers(world);
  const ferry::detail::CmaCounters& k = ferry::detail::cma_counters();
  const uint64_t sent = k.descriptors_sent.load(), reads = k.reads.load(),
                 fallbacks = k.fallbacks.load(), scattered = k.scattered_reads.load();
  std::fprintf(stderr, "[rank %d] CMA: %llu descriptors sent, %llu reads (%llu bytes, %llu "
               "scattered), %llu fallbacks; %d peers unreadable\n", world.rank(),
               static_cast<unsigned long long>(sent), static_cast<unsigned long long>(reads),
               static_cast<unsigned long long>(k.bytes_read.load()),
               static_cast<unsigned long long>(scattered),
               static_cast<unsigned long long>(fallbacks), unreadable);
  const bool ok =
      sent > 0 && (unreadable == 0 ? reads > 0 && scattered > 0 && fallbacks == 0
                                   : fallbacks >= 1 &&
                                         (unreadable < world.size() - 1 || reads == 0));
  return ok ? "" : "large messages did not take the CMA protocol as expected (counters above)";
}

const bool registered = spmd::add_final_check(check_cma_counters);

}  // namespace
