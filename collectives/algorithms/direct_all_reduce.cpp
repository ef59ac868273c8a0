#include <ferry/collectives/algorithms/algorithms.h>

#include <ferry/collectives/engine/reduce_kernels.h>

#include <cstring>

namespace ferry::detail {

// One round: every rank sends its whole payload to every other rank and receives theirs, then
// combines all W payloads itself, in rank order, so every rank computes the same expression and
// ends with the same bits. It moves W - 1 payloads each way, so it is for small payloads and
// few ranks (the algorithm table's limits), where one round beats recursive doubling's log2 W.
// All its sends and receives can be posted at once, which is what lets an op start at issue
// (ops/direct_post.h).

void post_direct_all_reduce(OpContext& ctx, const char* in, char* gathered, size_t bytes) {
  const int n = ctx.size(), r = ctx.rank();
  for (int s = 1; s < n; ++s) {
    const int to = (r + s) % n, from = (r - s + n) % n;
    ctx.recv(from, 0, gathered + static_cast<size_t>(from) * bytes, bytes);
    ctx.send(to, 0, in, bytes);
  }
}

void finish_direct_all_reduce(int rank, int size, const char* in, char* out, char* gathered,
                              size_t count, const ReduceSpec& spec) {
  const size_t bytes = count * spec.elem_bytes();
  if (bytes == 0) return;
  std::memcpy(gathered + static_cast<size_t>(rank) * bytes, in, bytes);
  std::memcpy(out, gathered, bytes);
  for (int k = 1; k < size; ++k)
    combine(out, out, gathered + static_cast<size_t>(k) * bytes, count, spec.dtype, spec.op);
}

void direct_all_reduce(OpContext& ctx, const char* in, char* out, size_t count,
                       const ReduceSpec& spec) {
  const size_t bytes = count * spec.elem_bytes();
  char* gathered = ctx.scratch(0, bytes * static_cast<size_t>(ctx.size()));
  post_direct_all_reduce(ctx, in, gathered, bytes);
  ctx.wait_all();
  finish_direct_all_reduce(ctx.rank(), ctx.size(), in, out, gathered, count, spec);
}

}  // namespace ferry::detail
