#include <ferry/collectives/algorithms/algorithms.h>

#include <ferry/collectives/engine/reduce_kernels.h>
#include <ferry/collectives/group.h>

#include <algorithm>
#include <cstring>

namespace ferry::detail {

// all_gather and reduce_scatter for ranks on several hosts, so that each block crosses the
// link between two hosts once, whatever the number of ranks either holds.
//
// The flat ring sends W - 1 blocks out of every host whose ranks are consecutive: of those,
// the blocks that came in from the next host go back out to it. Here a block moves between two
// hosts once, through one rank of the receiving host, its relay (relay_of): a host sends its
// L blocks to each other host, (W - L) blocks out of a host of L ranks in all (2 hosts of 2
// ranks: 2 blocks where the ring sends 3). The steps inside a host run between its ranks.
//
// all_gather, in two rounds:
//  1. every rank sends its block to its relay on every other host and to its host's ranks;
//  2. every relay hands on to its host's ranks the blocks it received from other hosts.
// reduce_scatter, in two rounds:
//  1. inside each host, every rank sends its input's block t to the host's relay for rank t
//     (rank t itself when it is on the host), which folds the host's blocks t;
//  2. every relay sends its host's sum of block t to rank t, which folds the hosts' sums.
// The order of a reduce_scatter's additions, hence the bits of a float sum: rank t's result is
// the left fold over the hosts, in host order (hosts numbered by their lowest rank), of each
// host's left fold over its ranks in ascending rank order:
//   ((in_a[t] + in_b[t]) + ...) over host 0's ranks a < b < ..., then + host 1's fold, ...
// The same on every run and for any transport, for a given layout; it is not the flat ring's
// order, so a float sum may differ from the ring's in its last bits.
//
// Every message's step is its block's rank (a pair of ranks exchanges at most one message per
// block), so a group of kFingerprintStep ranks or more runs the ring instead.
namespace {

struct Relays {
  HostLayout layout;
  int me = 0;
  int host = 0;                  // this rank's host
  std::vector<int> peers;        // this host's other ranks, ascending
  std::vector<int> for_block;    // by rank t: the rank of this host that receives or folds t
};

// The rank of host `h` through which block `t` reaches host `h`: t itself on its own host;
// elsewhere the blocks of other hosts' ranks, in rank order, go to host h's ranks in turn,
// so that a host's ranks share its incoming blocks evenly.
int relay_of(const HostLayout& layout, int h, int t) {
  const std::vector<int>& on = layout.hosts[static_cast<size_t>(h)];
  if (layout.host_of[static_cast<size_t>(t)] == h) return t;
  const auto before_t = std::lower_bound(on.begin(), on.end(), t) - on.begin();
  const size_t k = static_cast<size_t>(t - before_t);  // ranks below t not on host h
  return on[k % on.size()];
}

Relays relays_of(GroupImpl& g) {
  Relays r;
  r.layout = host_layout_of(g);
  r.me = r.layout.rank;
  r.host = r.layout.host();
  const std::vector<int>& mine = r.layout.hosts[static_cast<size_t>(r.host)];
  for (int p : mine)
    if (p != r.me) r.peers.push_back(p);
  const int world = static_cast<int>(r.layout.host_of.size());
  r.for_block.resize(static_cast<size_t>(world));
  size_t k = 0;  // as relay_of counts, in one pass
  for (int t = 0; t < world; ++t)
    r.for_block[static_cast<size_t>(t)] =
        r.layout.host_of[static_cast<size_t>(t)] == r.host ? t : mine[k++ % mine.size()];
  return r;
}

bool too_many_ranks(const OpContext& ctx) {
  return static_cast<uint32_t>(ctx.size()) >= OpContext::kFingerprintStep;
}

}  // namespace

void hierarchical_all_gather(OpContext& ctx, char* buf, const Blocks& blocks, const char* own) {
  if (too_many_ranks(ctx)) {
    ring_all_gather(ctx, buf, blocks, own);
    return;
  }
  const Relays r = relays_of(ctx.group());
  const auto me = static_cast<uint32_t>(r.me);
  char* own_place = buf + blocks.offset[r.me];
  if (own == nullptr) own = own_place;
  const int world = ctx.size();
  // Round 1: the host's blocks, and the other hosts' blocks this rank relays.
  for (int t = 0; t < world; ++t) {
    if (t == r.me) continue;
    const bool local = r.layout.host_of[static_cast<size_t>(t)] == r.host;
    if (local || r.for_block[static_cast<size_t>(t)] == r.me)
      ctx.recv(t, static_cast<uint32_t>(t), buf + blocks.offset[t], blocks.bytes[t]);
  }
  for (int h = 0; h < r.layout.num_hosts(); ++h)
    if (h != r.host) ctx.send(relay_of(r.layout, h, r.me), me, own, blocks.bytes[r.me]);
  for (int p : r.peers) ctx.send(p, me, own, blocks.bytes[r.me]);
  if (own != own_place && blocks.bytes[r.me] > 0) std::memcpy(own_place, own, blocks.bytes[r.me]);
  ctx.wait_all();
  if (r.peers.empty()) return;
  // Round 2: the relays hand the other hosts' blocks on inside the host.
  for (int t = 0; t < world; ++t) {
    if (r.layout.host_of[static_cast<size_t>(t)] == r.host) continue;
    const int relay = r.for_block[static_cast<size_t>(t)];
    const auto step = static_cast<uint32_t>(t);
    if (relay != r.me) {
      ctx.recv(relay, step, buf + blocks.offset[t], blocks.bytes[t]);
      continue;
    }
    for (int p : r.peers) ctx.send(p, step, buf + blocks.offset[t], blocks.bytes[t]);
  }
  ctx.wait_all();
}

namespace {

// dst = the left fold of `parts` (at least one). dst may be parts[0] or parts[1]; where it is a
// later part (this rank's own block, read in place), the running value is kept in `spare`
// (bytes that may be overwritten: parts[0] when it is a received copy) until that part's turn.
void fold(char* dst, const std::vector<const char*>& parts, size_t bytes, const ReduceSpec& spec,
          char* spare) {
  const size_t count = bytes / spec.elem_bytes();
  if (parts.size() == 1) {
    if (dst != parts[0] && bytes > 0) std::memmove(dst, parts[0], bytes);
    return;
  }
  const auto later = std::find(parts.begin() + 2, parts.end(), dst);
  const size_t dst_turn = static_cast<size_t>(later - parts.begin());  // parts.size(): none
  const char* running = parts[0];
  for (size_t k = 1; k < parts.size(); ++k) {
    // Each step reads element i of the running value and of part k before writing it.
    char* into = k >= dst_turn || dst_turn == parts.size() ? dst : spare;
    combine(into, running, parts[k], count, spec.dtype, spec.op);
    running = into;
  }
}

}  // namespace

void hierarchical_reduce_scatter(OpContext& ctx, const char* const* in_block, char* out,
                                 const Blocks& blocks, const ReduceSpec& spec) {
  if (too_many_ranks(ctx)) {
    ring_reduce_scatter(ctx, in_block, nullptr, out, blocks, spec);
    return;
  }
  const Relays r = relays_of(ctx.group());
  const int world = ctx.size();
  const size_t peers = r.peers.size();
  const size_t hosts = static_cast<size_t>(r.layout.num_hosts());
  // Slot 0: round 1's blocks from the host's other ranks (`peers` per block folded here), then
  // round 2's sums from the other hosts. Slot 1: the sums this rank sends to other hosts.
  size_t folded_bytes = 0, sent_bytes = 0;
  for (int t = 0; t < world; ++t) {
    if (r.for_block[static_cast<size_t>(t)] != r.me) continue;
    folded_bytes += blocks.bytes[t];
    if (t != r.me) sent_bytes += blocks.bytes[t];
  }
  const size_t mine = blocks.bytes[r.me];
  char* got = ctx.scratch(0, std::max(folded_bytes * peers, mine * hosts));
  char* sums = peers > 0 ? ctx.scratch(1, sent_bytes) : nullptr;
  // Round 1: the host's blocks t go to the rank that folds them.
  std::vector<size_t> got_at(static_cast<size_t>(world), 0);  // block t's first peer copy
  size_t at = 0;
  for (int t = 0; t < world; ++t) {
    const int folder = r.for_block[static_cast<size_t>(t)];
    const auto step = static_cast<uint32_t>(t);
    if (folder != r.me) {
      ctx.send(folder, step, in_block[t], blocks.bytes[t]);
      continue;
    }
    got_at[static_cast<size_t>(t)] = at;
    for (int p : r.peers) {
      ctx.recv(p, step, got + at, blocks.bytes[t]);
      at += blocks.bytes[t];
    }
  }
  ctx.wait_all();
  // Each host's fold of block t, in ascending rank order, into `out` for this rank's own block
  // and into `sums` for the others.
  const std::vector<int>& on_host = r.layout.hosts[static_cast<size_t>(r.host)];
  std::vector<const char*> parts;
  std::vector<const char*> to_send(static_cast<size_t>(world), nullptr);
  std::vector<bool> sends(static_cast<size_t>(world), false);  // to_send may be null (0 bytes)
  size_t sum_at = 0;
  for (int t = 0; t < world; ++t) {
    if (r.for_block[static_cast<size_t>(t)] != r.me) continue;
    parts.clear();
    size_t peer = 0;
    for (int p : on_host)
      parts.push_back(p == r.me ? in_block[t]
                                : got + got_at[static_cast<size_t>(t)] + blocks.bytes[t] * peer++);
    // parts[0] is a received copy whenever this rank is not its host's first.
    char* spare = got + got_at[static_cast<size_t>(t)];
    if (t == r.me) {
      fold(out, parts, blocks.bytes[t], spec, spare);
      continue;
    }
    sends[static_cast<size_t>(t)] = true;
    if (peers == 0) {
      to_send[static_cast<size_t>(t)] = in_block[t];  // a host of one rank: its block as it is
    } else {
      fold(sums + sum_at, parts, blocks.bytes[t], spec, spare);
      to_send[static_cast<size_t>(t)] = sums + sum_at;
      sum_at += blocks.bytes[t];
    }
  }
  if (hosts == 1) return;
  // Round 2: every host's sum of this rank's block comes from its folder there.
  for (int h = 0; h < static_cast<int>(hosts); ++h)
    if (h != r.host)
      ctx.recv(relay_of(r.layout, h, r.me), static_cast<uint32_t>(r.me),
               got + mine * static_cast<size_t>(h), mine);
  for (int t = 0; t < world; ++t)
    if (sends[static_cast<size_t>(t)])
      ctx.send(t, static_cast<uint32_t>(t), to_send[static_cast<size_t>(t)], blocks.bytes[t]);
  ctx.wait_all();
  // The running value stays in host 0's buffer until this host's turn, then goes on in `out`
  // (which holds this host's sum, read in its turn).
  const auto host_sum = [&](int h) -> char* {
    return h == r.host ? out : got + mine * static_cast<size_t>(h);
  };
  const size_t count = mine / spec.elem_bytes();
  const char* running = host_sum(0);
  for (int h = 1; h < static_cast<int>(hosts); ++h) {
    char* dst = h >= r.host ? out : host_sum(0);
    combine(dst, running, host_sum(h), count, spec.dtype, spec.op);
    running = dst;
  }
}

void hierarchical_reduce_scatter(OpContext& ctx, const char* in, char* out, const Blocks& blocks,
                                 const ReduceSpec& spec) {
  std::vector<const char*> in_block;
  in_block.reserve(blocks.offset.size());
  for (size_t off : blocks.offset) in_block.push_back(in + off);
  hierarchical_reduce_scatter(ctx, in_block.data(), out, blocks, spec);
}

}  // namespace ferry::detail
