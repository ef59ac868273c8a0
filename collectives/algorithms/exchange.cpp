// Algorithms that are a fixed pattern of direct messages: pairwise all-to-all, direct
// all-gather, linear gather and scatter, and the dissemination barrier.
#include <ferry/collectives/algorithms/algorithms.h>

#include <cstring>
#include <utility>

namespace ferry::detail {

void pairwise_all_to_all(OpContext& ctx, const Exchange& x) {
  post_pairwise_all_to_all(ctx, x);
  ctx.wait_all();
}

void post_pairwise_all_to_all(OpContext& ctx, const Exchange& x) {
  const int n = ctx.size(), r = ctx.rank();
  // All pairs are posted at once, in pairwise order so that no rank is everyone's first target.
  for (int s = 1; s < n; ++s) {
    const int to = (r + s) % n, from = (r - s + n) % n;
    ctx.recv(from, 0, x.recv[from], x.recv_bytes[from]);
    ctx.send(to, 0, x.send[to], x.send_bytes[to]);
  }
  // Our own block moves while the peers' are under way (no other block overlaps it).
  if (x.recv_bytes[r] > 0 && x.recv[r] != x.send[r])
    std::memcpy(x.recv[r], x.send[r], x.recv_bytes[r]);
}

void post_pairwise_all_to_all(OpContext& ctx, const char* send, const size_t* send_offset,
                              const size_t* send_bytes, char* recv, const size_t* recv_offset,
                              const size_t* recv_bytes) {
  const int n = ctx.size(), r = ctx.rank();
  // In the order pairwise_all_to_all posts them: the messages match whichever form a rank runs.
  for (int s = 1; s < n; ++s) {
    const int to = (r + s) % n, from = (r - s + n) % n;
    ctx.recv(from, 0, recv + recv_offset[from], recv_bytes[from]);
    ctx.send(to, 0, send + send_offset[to], send_bytes[to]);
  }
  if (recv_bytes[r] > 0 && recv + recv_offset[r] != send + send_offset[r])
    std::memcpy(recv + recv_offset[r], send + send_offset[r], recv_bytes[r]);
}

void direct_all_gather(OpContext& ctx, char* buf, const Blocks& blocks, const char* own) {
  const int n = ctx.size(), r = ctx.rank();
  char* own_place = buf + blocks.offset[r];
  if (own == nullptr) own = own_place;
  for (int s = 1; s < n; ++s) {
    const int to = (r + s) % n, from = (r - s + n) % n;
    ctx.recv(from, 0, buf + blocks.offset[from], blocks.bytes[from]);
    ctx.send(to, 0, own, blocks.bytes[r]);
  }
  if (own != own_place && blocks.bytes[r] > 0) std::memcpy(own_place, own, blocks.bytes[r]);
  ctx.wait_all();
}

void linear_gather(OpContext& ctx, const char* in, size_t bytes, const std::vector<char*>& recv,
                   const std::vector<size_t>& recv_bytes, int root) {
  const int n = ctx.size(), r = ctx.rank();
  if (r != root) {
    ctx.send(root, 0, in, bytes);
  } else {
    for (int k = 0; k < n; ++k) {
      if (k == r) {
        if (bytes > 0 && recv[k] != in) std::memcpy(recv[k], in, bytes);
      } else {
        ctx.recv(k, 0, recv[k], recv_bytes[k]);
      }
    }
  }
  ctx.wait_all();
}

void linear_scatter(OpContext& ctx, const std::vector<const char*>& send,
                    const std::vector<size_t>& send_bytes, char* out, size_t bytes, int root) {
  const int n = ctx.size(), r = ctx.rank();
  if (r != root) {
    ctx.recv(root, 0, out, bytes);
  } else {
    for (int k = 0; k < n; ++k) {
      if (k == r) {
        if (bytes > 0 && send[k] != out) std::memcpy(out, send[k], bytes);
      } else {
        ctx.send(k, 0, send[k], send_bytes[k]);
      }
    }
  }
  ctx.wait_all();
}

// Round k: tell rank r + 2^k we are here and hear from rank r - 2^k. After ceil(log2 W) rounds
// every rank has (transitively) heard from every other.
void dissemination_barrier(OpContext& ctx) {
  const int n = ctx.size(), r = ctx.rank();
  uint32_t round = 0;
  for (int d = 1; d < n; d <<= 1, ++round) {
    ctx.send((r + d) % n, round, nullptr, 0);
    ctx.recv((r - d + n) % n, round, nullptr, 0);
    ctx.wait_all();
  }
}

}  // namespace ferry::detail
