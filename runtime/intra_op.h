// Intra-op threads: one op's arithmetic split over several threads of the calling rank.
//
// A rank is one thread. When it has the host to itself (one rank per host, a machine with more
// cores than ranks), its largest kernels can use the idle cores: the GEMMs of ferry::linear, the
// pooled embedding lookups and their fused backward, and the dot interaction. They split their
// work into contiguous ranges (rows of a matrix, tables, samples) that give the same results as
// the whole; each range is computed exactly as before, so the results do not depend on the count.
//
// Off by default (1 thread), as it only pays where cores are idle: with the host's cores filled
// by ranks, a helper thread takes a core from a rank. torch.set_num_threads is the counterpart.
#pragma once

#include <cstdint>
#include <type_traits>

namespace ferry {

// Threads an op may use on the calling thread's behalf, the caller included: 1 runs everything
// on the calling thread. Each thread that runs ops gets its own n - 1 helpers on first use
// (ranks as threads of one process get theirs each). Applies to ops started after the call.
// InvalidArgument unless 1 <= n <= 256.
void set_intra_op_threads(int n);
int intra_op_threads();

namespace detail {

using ChunkFn = void (*)(void* context, int64_t begin, int64_t end);

// Splits [0, n) into at most intra_op_threads() contiguous chunks of at least `grain` items and
// runs fn on each, one on the calling thread and the others on its helpers; returns when every
// chunk is done, rethrowing the first exception a chunk threw.
void run_chunks(int64_t n, int64_t grain, ChunkFn fn, void* context);

// f(begin, end) over [0, n), split as run_chunks does; on the calling thread alone when one
// thread is set or n is under two grains.
template <class F>
void parallel_for(int64_t n, int64_t grain, F&& f) {
  if (n <= 0) return;
  if (intra_op_threads() == 1 || n < 2 * grain) {
    f(int64_t{0}, n);
    return;
  }
  using Callable = std::remove_reference_t<F>;
  run_chunks(
      n, grain,
      [](void* context, int64_t begin, int64_t end) {
        (*static_cast<Callable*>(context))(begin, end);
      },
      const_cast<void*>(static_cast<const void*>(&f)));
}

}  // namespace detail
}  // namespace ferry
