// The bandwidths the planner prices a plan's bytes at (Topology::intra_node_bandwidth and
// cross_node_bandwidth) taken from the job: measured at start-up between its hosts, given by the
// user, or the planner's defaults, each with where it came from so that a trainer can say so.
//
//   HostBandwidths bw = measure_host_bandwidths(world);   // collective over `world`
//   std::printf("%s\n", bw.describe().c_str());
//   Topology topo;
//   bw.apply_to(topo);
//
// The measurement is a ping-pong of `message_bytes` each way between two ranks, timed on the
// first: after one untimed round trip (connections are made on first use), `rounds` timed ones,
// whose median gives the pair's bytes per second in one direction (2 * message_bytes / round
// trip). Across hosts: the first rank of every pair of hosts (hosts in the order of their first
// ranks, pairs one after another), the slowest pair's figure standing for all (a plan's
// all-to-all waits for its slowest link). Inside a host: the first two ranks of the first host
// that has two. Each pair is measured alone, so the figures are what one rank gets from an idle
// link; ranks that share a host share its link in a step.
//
// Every member gets the same figures (an all_reduce of the timing ranks' results over the
// group), hence the same plan. The pairs run on a group of their own (a split of `group`), so a
// pair that fails or passes the deadline poisons only that group: its figure falls back to the
// default, with the reason in `note`, and `group` stays usable. Nothing is measured on one host
// (no byte crosses hosts) nor on the local transport, whose ranks are threads of one process;
// the defaults stand there too, saying why.
#pragma once

#include <ferry/collectives/group.h>
#include <ferry/collectives/torchrec/planner/cost_model.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace ferry::torchrec {

enum class BandwidthSource { Default, Given, Measured };
std::string_view to_string(BandwidthSource source);

struct HostBandwidths {
  double intra_host = Topology{}.intra_node_bandwidth;  // bytes/s between ranks of one host
  double cross_host = Topology{}.cross_node_bandwidth;  // bytes/s between hosts
  BandwidthSource intra_source = BandwidthSource::Default;
  BandwidthSource cross_source = BandwidthSource::Default;
  std::string note;  // how they were measured, or why a default stands

  // Sets the topology's intra_node_bandwidth and cross_node_bandwidth.
  void apply_to(Topology& topology) const;
  // "cross-host bandwidth 1.10 GB/s (measured), intra-host 4.20 GB/s (measured): <note>".
  std::string describe() const;
};

// The defaults, with the reason they stand.
HostBandwidths default_host_bandwidths(std::string why);

// The user's cross-host figure (bytes/s, > 0 and finite: InvalidArgument naming the value
// otherwise); the intra-host one stays the default.
HostBandwidths given_cross_host_bandwidth(double bytes_per_second);

struct BandwidthProbeOptions {
  int64_t message_bytes = int64_t{4} << 20;  // each way, per round trip
  int rounds = 5;                            // timed round trips per pair (after one untimed)
  // For all pairs together, from the moment they start (the group is split first).
  std::chrono::milliseconds deadline{3000};
};

// Collective over `group` when the job knows its hosts and they are more than one (a split,
// the pairs, an all_reduce): every member must call it, in the same order relative to other
// collectives on `group`. Otherwise it returns the defaults without communicating. Throws
// InvalidArgument for a null group or options out of range (message_bytes >= 1, rounds >= 1,
// deadline > 0), before anything moves.
HostBandwidths measure_host_bandwidths(const Group& group,
                                       const BandwidthProbeOptions& options = {});

}  // namespace ferry::torchrec
