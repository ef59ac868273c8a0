#include <ferry/collectives/algorithms/algorithms.h>

#include <ferry/collectives/engine/reduce_kernels.h>

#include <cstring>

namespace ferry::detail {

// With W a power of two: log2(W) rounds; in round i every rank swaps its whole partial result
// with the rank whose number differs in bit i and combines the two. Each round is one
// exchange, both directions at once, where the tree all_reduce needs two one-way rounds per
// level (up to the root and back down): half the latency for small payloads.
//
// Otherwise, with P the largest power of two below W and R = W - P: among the first 2R ranks
// each even rank first hands its data to the odd rank after it and sits out; the P remaining
// ranks run the rounds above; then each odd rank among the first 2R hands the result back.
//
// Every rank ends with the same bits: each combine puts the lower-numbered participant's data
// first, so both partners of a round compute the same expression.
void recursive_doubling_all_reduce(OpContext& ctx, const char* in, char* out, size_t count,
                                   const ReduceSpec& spec) {
  const int n = ctx.size(), r = ctx.rank();
  const size_t bytes = count * spec.elem_bytes();
  if (out != in && bytes > 0) std::memcpy(out, in, bytes);
  if (n == 1) return;
  char* theirs = ctx.scratch(0, bytes);
  int pof2 = 1;
  while (pof2 * 2 <= n) pof2 *= 2;
  const int rem = n - pof2;
  // Participant v of the P is rank 2v + 1 for v < R (the odd rank of a folded pair), else v + R.
  auto rank_of = [rem](int v) { return v < rem ? 2 * v + 1 : v + rem; };
  uint32_t step = 0;

  int v = r - rem;  // this rank's participant number, -1 when it sits out
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      ctx.send(r + 1, step, out, bytes);
      ctx.wait_all();
      v = -1;
    } else {
      ctx.recv(r - 1, step, theirs, bytes);
      ctx.wait_all();
      combine(out, theirs, out, count, spec.dtype, spec.op);  // the lower rank's data first
      v = r / 2;
    }
  }
  ++step;

  if (v >= 0) {
    for (int mask = 1; mask < pof2; mask <<= 1, ++step) {
      const int pv = v ^ mask;
      const int partner = rank_of(pv);
      ctx.send(partner, step, out, bytes);
      ctx.recv(partner, step, theirs, bytes);
      ctx.wait_all();  // our send of `out` is done before `out` is overwritten
      if (v < pv)
        combine(out, out, theirs, count, spec.dtype, spec.op);
      else
        combine(out, theirs, out, count, spec.dtype, spec.op);
    }
  } else {
    step += static_cast<uint32_t>(__builtin_ctz(static_cast<unsigned>(pof2)));
  }

  if (r < 2 * rem) {
    if (r % 2 == 1)
      ctx.send(r - 1, step, out, bytes);
    else
      ctx.recv(r + 1, step, out, bytes);
    ctx.wait_all();
  }
}

}  // namespace ferry::detail
