#include <ferry/collectives/algorithms/algorithms.h>

#include <ferry/collectives/algorithm_table.h>
#include <ferry/collectives/group.h>

#include <algorithm>
#include <cstring>

namespace ferry::detail {

// all_reduce in three parts, so that the link between hosts carries each byte once per host
// rather than once per rank:
//  1. on every host, a ring reduce-scatter among the host's ranks: local rank j ends with
//     slice j of the host's sum;
//  2. for each slice j, an all_reduce of it among local rank j of every host (one rank per
//     host), by the algorithm the table picks for that slice among that many ranks;
//  3. on every host, a ring all_gather of the slices among the host's ranks.
// The payload is cut into S slices, S the fewest ranks any host holds, so that every host has
// a rank for every slice. A host with more ranks than S (3 + 1: S is 1) gives its extra ranks
// empty blocks in parts 1 and 3: its ring then reduces and hands on the slices of the others.
//
// Every rank ends with the same bits: each block of a host's sum is reduced once, by one
// rank's ring step, and shared by part 3; each slice's sum across hosts is computed so that its
// ranks agree (the ring reduces a block once and shares it; recursive doubling and the direct
// exchange compute one expression on every rank). The order of the additions differs from the
// flat ring's, so the result may differ from it in the last bits of a float sum, but it is the
// same from run to run for a given layout and size.
namespace {

// The group's hosts (Group::host_layout: ranks whose host is unknown, key 0 as on the local
// transport before init's handshake, are one host, and the algorithm is then the ring
// all_reduce), with the fewest and the most ranks any host holds.
struct Hosts {
  HostLayout layout;
  size_t fewest = 0;
  size_t most = 0;
};

Hosts hosts_of(GroupImpl& g) {
  Hosts h{host_layout_of(g)};
  h.fewest = h.most = h.layout.hosts.front().size();
  for (const auto& on : h.layout.hosts) {
    h.fewest = std::min(h.fewest, on.size());
    h.most = std::max(h.most, on.size());
  }
  return h;
}

// Blocks of `slices` even slices of `count` elements, then empty blocks up to `ranks` blocks.
Blocks host_blocks(size_t count, int slices, int ranks, size_t elem_bytes) {
  Blocks b = even_blocks(count, slices, elem_bytes);
  const size_t end = b.total();
  b.offset.resize(static_cast<size_t>(ranks), end);
  b.bytes.resize(static_cast<size_t>(ranks), 0);
  return b;
}

// Part 2 for the slice at `data` (`count` elements), by `algorithm`.
void all_reduce_across(OpContext& ctx, Algorithm algorithm, char* data, size_t count,
                       const ReduceSpec& spec) {
  switch (algorithm) {
    case Algorithm::Direct: direct_all_reduce(ctx, data, data, count, spec); break;
    case Algorithm::Ring: ring_all_reduce(ctx, data, data, count, spec); break;
    default: recursive_doubling_all_reduce(ctx, data, data, count, spec); break;
  }
}

}  // namespace

void hierarchical_all_reduce(OpContext& ctx, const char* in, char* out, size_t count,
                             const ReduceSpec& spec) {
  const Hosts hosts = hosts_of(ctx.group());
  const std::vector<int>& mine = hosts.layout.hosts[static_cast<size_t>(hosts.layout.host())];
  const int num_hosts = hosts.layout.num_hosts();
  // Steps: part 1 below `most`, part 2 (at most num_hosts + 2) next, part 3 after. A layout
  // whose steps would not fit the transports' tags runs the flat ring (every rank decides alike).
  const auto inter_step = static_cast<uint32_t>(hosts.most);
  const uint32_t gather_step = inter_step + static_cast<uint32_t>(num_hosts) + 2;
  if (gather_step + hosts.most >= OpContext::kFingerprintStep) {
    ring_all_reduce(ctx, in, out, count, spec);
    return;
  }
  const int slices = static_cast<int>(hosts.fewest);
  const int local_rank = hosts.layout.local_rank();
  const Blocks blocks =
      host_blocks(count, slices, static_cast<int>(mine.size()), spec.elem_bytes());
  const OpContext::View host{mine.data(), static_cast<int>(mine.size()), local_rank, 0};

  // Whichever way the parts end (a failure unwinds through them too), the context is the whole
  // group's again: what reports the failure names group ranks, and `peers` goes out of scope.
  struct Widen {
    OpContext& ctx;
    ~Widen() { ctx.widen(); }
  } widen{ctx};
  ctx.narrow(host);
  ring_reduce_scatter(ctx, in, out, out + blocks.offset[local_rank], blocks, spec);
  // Part 2 takes the table's point-to-point choice for the largest slice among the hosts, for
  // every slice alike.
  const Algorithm across = automatic_algorithm(Collective::AllReduce, blocks.bytes[0],
                                               num_hosts, /*native=*/false);
  if (local_rank < slices && num_hosts > 1) {
    std::vector<int> peers;  // local rank `local_rank` of every host
    peers.reserve(hosts.layout.hosts.size());
    for (const auto& on : hosts.layout.hosts)
      peers.push_back(on[static_cast<size_t>(local_rank)]);
    ctx.narrow({peers.data(), num_hosts, hosts.layout.host(), inter_step});
    all_reduce_across(ctx, across, out + blocks.offset[local_rank],
                      blocks.bytes[local_rank] / spec.elem_bytes(), spec);
  }
  // Part 3 in the op's second phase on every rank: the ring of part 2 moved there, and a rank
  // of a host's ring that took no part in part 2 (an extra rank of a larger host) must use the
  // same tags as the ranks that did.
  if (ctx.phase() == 0) ctx.next_phase();
  ctx.narrow({host.ranks, host.size, host.rank, gather_step});
  ring_all_gather(ctx, out, blocks);
}

}  // namespace ferry::detail
