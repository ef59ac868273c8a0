// The planner's bandwidths measured on simulated hosts (tools/hosts), as every rank runs it
// (torchrec measure_host_bandwidths, planner/host_bandwidth.h):
//
//  1. Measured: both figures measured (> 0), the same bits on every rank, and the note naming
//     the pairs timed: the hosts' first ranks, every pair of hosts (with three hosts, the
//     slowest standing for all), and the first two ranks of the first host holding two.
//  2. Past the deadline (64 MiB each way within 1 ms): the defaults on every rank, saying so,
//     and the caller's group still usable (an all_reduce, then a measurement that succeeds).
//
// Exit status 0 when every check passed on every rank. Over UCX (the TCP rendezvous) only.
#include "tests/mpi/job_checks.h"
#include <ferry/collectives/torchrec/torchrec.h>
#include <ferry/ferry.h>

#include <cstring>
#include <string>

namespace {

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Whether every rank of `world` holds the same bits of the two figures.
bool same_on_every_rank(const ferry::torchrec::HostBandwidths& bw, ferry::Group& world) {
  using namespace ferry;
  Tensor mine = empty({2}, DType::Float64);
  mine.data<double>()[0] = bw.intra_host;
  mine.data<double>()[1] = bw.cross_host;
  Tensor all = empty({2 * world.size()}, DType::Float64);
  all_gather(mine, all, world).wait();
  for (int r = 0; r < world.size(); ++r)
    if (std::memcmp(all.data<double>() + 2 * r, mine.data<double>(), 16) != 0) return false;
  return true;
}

}  // namespace

int main() {
  using namespace ferry;
  using namespace ferry::torchrec;
  ftest_mpi::Checks c;
  bool ok = false;
  {
    Group world = init();
    const HostLayout layout = world.host_layout();
    c.expect(layout.known && layout.num_hosts() >= 2, "the job spans hosts");

    // 1. Measured.
    const HostBandwidths bw = measure_host_bandwidths(world);
    c.expect(bw.cross_source == BandwidthSource::Measured && bw.cross_host > 0,
             "cross-host measured: " + bw.describe());
    c.expect(bw.intra_source == BandwidthSource::Measured && bw.intra_host > 0,
             "intra-host measured: " + bw.describe());
    c.expect(same_on_every_rank(bw, world), "the same figures on every rank");
    const std::string first_two = "ranks " + std::to_string(layout.hosts[0][0]) + " and " +
                                  std::to_string(layout.hosts[0][1]) + " inside a host";
    const std::string hosts_01 = "ranks " + std::to_string(layout.hosts[0][0]) + " and " +
                                 std::to_string(layout.hosts[1][0]);
    c.expect(has(bw.note, first_two) && has(bw.note, hosts_01), "the pairs named: " + bw.note);
    c.expect(has(bw.note, "the slowest pair stands for all") == (layout.num_hosts() > 2),
             "the slowest pair said to stand for all exactly with three hosts: " + bw.note);
    if (world.rank() == 0) std::printf("hosts_bandwidth: %s\n", bw.describe().c_str());

    // 2. Past the deadline: the defaults, and the group goes on.
    BandwidthProbeOptions late;
    late.message_bytes = int64_t{64} << 20;
    late.deadline = std::chrono::milliseconds(1);
    const HostBandwidths fallback = measure_host_bandwidths(world, late);
    c.expect(fallback.cross_source == BandwidthSource::Default &&
                 fallback.cross_host == Topology{}.cross_node_bandwidth,
             "past the deadline, the default across hosts: " + fallback.describe());
    c.expect(has(fallback.note, "did not finish within its 1 ms deadline"),
             "the reason given: " + fallback.note);
    Tensor one = full({1}, 1.0, DType::Float64);
    all_reduce(one, world).wait();
    c.expect(one.get_flat(0) == world.size(), "the world group still reduces");
    const HostBandwidths again = measure_host_bandwidths(world);
    c.expect(again.cross_source == BandwidthSource::Measured, "measured again afterwards");
    ok = ftest_mpi::every_rank_passed(c, world, "hosts-bandwidth");
  }
  finalize();
  return ok ? 0 : 1;
}
