#include <ferry/collectives/algorithms/algorithms.h>

#include <ferry/collectives/engine/reduce_kernels.h>

#include <cstring>

namespace ferry::detail {
namespace {

// Ranks relative to the root, so the root is 0 and the tree below is the standard binomial one:
// relative rank v receives from v - lowbit(v) and sends to v + m for each m < lowbit(v).
int relative(int rank, int root, int n) { return (rank - root + n) % n; }
int absolute(int rel, int root, int n) { return (rel + root) % n; }

int lowest_bit_or_cover(int v, int n) {
  if (v != 0) return v & -v;
  int m = 1;
  while (m < n) m <<= 1;
  return m;  // the root "receives" from nobody and covers the whole tree
}

}  // namespace

void tree_broadcast(OpContext& ctx, char* buf, size_t bytes, int root) {
  const int n = ctx.size(), v = relative(ctx.rank(), root, n);
  const int low = lowest_bit_or_cover(v, n);
  if (v != 0) {
    ctx.recv(absolute(v - low, root, n), 0, buf, bytes);
    ctx.wait_all();
  }
  for (int m = low >> 1; m >= 1; m >>= 1) {
    if (v + m < n) ctx.send(absolute(v + m, root, n), 0, buf, bytes);
  }
  ctx.wait_all();
}

// Children are folded in from the nearest (m = 1) up, then the partial result goes to the parent.
void tree_reduce(OpContext& ctx, const char* in, char* out, size_t count, int root,
                 const ReduceSpec& spec) {
  const int n = ctx.size(), v = relative(ctx.rank(), root, n);
  const size_t bytes = count * spec.elem_bytes();
  const int low = lowest_bit_or_cover(v, n);
  // The accumulator: `out` on root, scratch elsewhere. It starts as a copy of `in` unless the
  // first child's contribution can be combined straight from `in`.
  char* acc = v == 0 ? out : ctx.scratch(1, bytes);
  char* tmp = ctx.scratch(0, bytes);
  const char* current = in;
  for (int m = 1; m < low && v + m < n; m <<= 1) {
    ctx.recv(absolute(v + m, root, n), 0, tmp, bytes);
    ctx.wait_all();
    combine(acc, current, tmp, count, spec.dtype, spec.op);
    current = acc;
  }
  if (v == 0) {
    if (current != acc && bytes > 0) std::memcpy(acc, current, bytes);
    return;
  }
  ctx.send(absolute(v - low, root, n), 0, current, bytes);
  ctx.wait_all();
}

}  // namespace ferry::detail
