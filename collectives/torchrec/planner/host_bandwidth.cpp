#include <ferry/collectives/torchrec/planner/host_bandwidth.h>

#include <ferry/collectives/collectives.h>
#include <ferry/collectives/torchrec/planner/plan_printer.h>
#include <ferry/collectives/torchrec/utils/format.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/log.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

namespace ferry::torchrec {

namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kOp = "torchrec measure_host_bandwidths";
constexpr int kTag = 0x6277;  // the probe's messages, on a group of its own

// What a timing rank contributes to the all_reduce (Min) instead of a figure: a failure
// anywhere outweighs every figure, a timeout (usually the cause of the other failures, which
// follow from the poisoned group) outweighs a failure, and a rank that timed nothing counts for
// nothing.
constexpr double kNotTimed = std::numeric_limits<double>::infinity();
constexpr double kFailed = -1;
constexpr double kTimedOut = -2;

// Two ranks that exchange messages (group ranks); `timer` times, the other echoes.
struct Pair {
  int timer;
  int echo;
  bool cross;  // between hosts, else inside one
};

// The pairs in the one order every member runs them (a total order: no two ranks wait for each
// other's next pair): inside the first host that holds two ranks, then the hosts' first ranks,
// pair by pair.
std::vector<Pair> probe_pairs(const HostLayout& layout) {
  std::vector<Pair> pairs;
  for (const auto& ranks : layout.hosts) {
    if (ranks.size() >= 2) {
      pairs.push_back({ranks[0], ranks[1], false});
      break;
    }
  }
  for (size_t a = 0; a < layout.hosts.size(); ++a)
    for (size_t b = a + 1; b < layout.hosts.size(); ++b)
      pairs.push_back({layout.hosts[a][0], layout.hosts[b][0], true});
  return pairs;
}

void wait_by(Work work, Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  work.wait(std::max(left, std::chrono::milliseconds(1)));
}

// The median one-way bytes per second of o.rounds round trips between this rank and `peer`
// (ranks of `probe`), after one untimed round trip; kNotTimed on the echoing side.
double ping_pong(const Group& probe, int peer, bool timer, const BandwidthProbeOptions& o,
                 Clock::time_point deadline) {
  Tensor out = zeros({o.message_bytes}, DType::UInt8);
  Tensor in = zeros({o.message_bytes}, DType::UInt8);
  std::vector<double> seconds;
  for (int round = 0; round <= o.rounds; ++round) {
    const Clock::time_point start = Clock::now();
    if (timer) {
      Work back = recv(in, peer, probe, kTag);  // posted first: the echo finds it waiting
      wait_by(send(out, peer, probe, kTag), deadline);
      wait_by(std::move(back), deadline);
    } else {
      wait_by(recv(in, peer, probe, kTag), deadline);
      wait_by(send(in, peer, probe, kTag), deadline);
    }
    if (round > 0) seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  if (!timer) return kNotTimed;
  std::sort(seconds.begin(), seconds.end());
  const double median = seconds[seconds.size() / 2];
  return 2.0 * static_cast<double>(o.message_bytes) / std::max(median, 1e-9);
}

// Runs this rank's pairs on `probe` (members: the group ranks of its ranks, ascending) and
// returns what it contributes for {intra, cross}: the smallest figure it timed, or a failure
// code. A failure leaves `probe` poisoned, so the later pairs fail at once, and their peers with
// them (a rank that gives up on a group tells its peers).
std::pair<double, double> run_pairs(const Group& probe, const std::vector<int>& members,
                                    const std::vector<Pair>& pairs, int me,
                                    const BandwidthProbeOptions& o) {
  auto probe_rank = [&](int group_rank) {
    return static_cast<int>(std::lower_bound(members.begin(), members.end(), group_rank) -
                            members.begin());
  };
  const Clock::time_point deadline = Clock::now() + o.deadline;
  double intra = kNotTimed, cross = kNotTimed;
  for (const Pair& p : pairs) {
    if (p.timer != me && p.echo != me) continue;
    const int peer = p.timer == me ? p.echo : p.timer;
    double& slot = p.cross ? cross : intra;
    double figure = kNotTimed;
    try {
      figure = ping_pong(probe, probe_rank(peer), p.timer == me, o, deadline);
      if (figure != kNotTimed)
        FERRY_LOG(Info, "torchrec", "measure_host_bandwidths: ranks ", p.timer, " and ", p.echo,
                  p.cross ? " (across hosts): " : " (inside a host): ", format_bandwidth(figure));
    } catch (const TimeoutError& e) {
      figure = kTimedOut;
      FERRY_LOG(Info, "torchrec", "measure_host_bandwidths: ranks ", p.timer, " and ", p.echo,
                ": ", e.what());
    } catch (const Error& e) {
      figure = kFailed;
      FERRY_LOG(Info, "torchrec", "measure_host_bandwidths: ranks ", p.timer, " and ", p.echo,
                ": ", e.what());
    }
    slot = std::min(slot, figure);
  }
  return {intra, cross};
}

// The figure of one kind from the all_reduced contributions; `what` names it in the note.
void take(double contribution, double& figure, BandwidthSource& source, const char* what,
          const BandwidthProbeOptions& o, std::string& note) {
  if (contribution > 0 && std::isfinite(contribution)) {
    figure = contribution;
    source = BandwidthSource::Measured;
    return;
  }
  note += std::string("; ") + what + ": the default, ";
  if (contribution == kTimedOut)
    note += "the measurement did not finish within its " + std::to_string(o.deadline.count()) +
            " ms deadline";
  else if (contribution == kFailed)
    note += "the measurement failed (FERRY_DEBUG=info says why)";
  else
    note += "no host holds two ranks";
}

// "ranks 0 and 2 across hosts, ranks 0 and 1 inside a host": the pairs measured.
std::string pairs_text(const std::vector<Pair>& pairs) {
  std::string cross, intra;
  int cross_pairs = 0;
  for (const Pair& p : pairs) {
    std::string& list = p.cross ? cross : intra;
    list += (list.empty() ? "ranks " : ", ") + std::to_string(p.timer) + " and " +
            std::to_string(p.echo);
    cross_pairs += p.cross ? 1 : 0;
  }
  std::string out = cross + " across hosts";
  if (cross_pairs > 1) out += " (the slowest pair stands for all)";
  return intra.empty() ? out : out + ", " + intra + " inside a host";
}

}  // namespace

std::string_view to_string(BandwidthSource source) {
  switch (source) {
    case BandwidthSource::Default: return "default";
    case BandwidthSource::Given: return "given";
    case BandwidthSource::Measured: return "measured";
  }
  return "?";
}

void HostBandwidths::apply_to(Topology& topology) const {
  topology.intra_node_bandwidth = intra_host;
  topology.cross_node_bandwidth = cross_host;
}

std::string HostBandwidths::describe() const {
  std::string out = "cross-host bandwidth " + format_bandwidth(cross_host) + " (" +
                    std::string(to_string(cross_source)) + "), intra-host " +
                    format_bandwidth(intra_host) + " (" + std::string(to_string(intra_source)) +
                    ")";
  return note.empty() ? out : out + ": " + note;
}

HostBandwidths default_host_bandwidths(std::string why) {
  HostBandwidths bw;
  bw.note = std::move(why);
  return bw;
}

HostBandwidths given_cross_host_bandwidth(double bytes_per_second) {
  FERRY_CHECK(bytes_per_second > 0 && std::isfinite(bytes_per_second), InvalidArgument,
              "torchrec given_cross_host_bandwidth: the bandwidth must be a finite number of "
              "bytes per second > 0, given ", bytes_per_second);
  HostBandwidths bw;
  bw.cross_host = bytes_per_second;
  bw.cross_source = BandwidthSource::Given;
  bw.note = "the cross-host figure as given, the intra-host one the planner's default";
  return bw;
}

HostBandwidths measure_host_bandwidths(const Group& group, const BandwidthProbeOptions& o) {
  detail::check_group(group, kOp);
  FERRY_CHECK(o.message_bytes >= 1 && o.rounds >= 1 && o.deadline.count() > 0, InvalidArgument,
              detail::where(kOp, group), ": message_bytes ", o.message_bytes, ", rounds ",
              o.rounds, " and deadline ", o.deadline.count(), " ms must each be >= 1");
  const HostLayout layout = group.host_layout();
  if (!layout.known)
    return default_host_bandwidths("not measured: the job's hosts are not known (the local "
                                   "transport's ranks are threads of one process, one host)");
  if (layout.num_hosts() == 1)
    return default_host_bandwidths("not measured: one host, no byte crosses hosts");

  const std::vector<Pair> pairs = probe_pairs(layout);
  std::vector<int> members;
  for (const Pair& p : pairs) members.insert(members.end(), {p.timer, p.echo});
  std::sort(members.begin(), members.end());
  members.erase(std::unique(members.begin(), members.end()), members.end());
  const int me = group.rank();
  const bool timing = std::binary_search(members.begin(), members.end(), me);
  const Group probe = group.split(timing ? 0 : kUndefinedColor, me);
  std::pair<double, double> mine{kNotTimed, kNotTimed};
  if (timing) mine = run_pairs(probe, members, pairs, me, o);

  Tensor figures = zeros({2}, DType::Float64);
  figures.data<double>()[0] = mine.first;
  figures.data<double>()[1] = mine.second;
  all_reduce(figures, group, ReduceOp::Min).wait();

  HostBandwidths bw;
  bw.note = "at start, " + format_bytes(o.message_bytes) + " each way, the median of " +
            std::to_string(o.rounds) + " round trips, between " + pairs_text(pairs);
  take(figures.data<double>()[1], bw.cross_host, bw.cross_source, "cross-host", o, bw.note);
  take(figures.data<double>()[0], bw.intra_host, bw.intra_source, "intra-host", o, bw.note);
  return bw;
}
}  // namespace ferry::torchrec
