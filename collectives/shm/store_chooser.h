// Which stores write a buffer that the peers on this host read last (internal).
//
// On some placements of a host's cores, a store into a cache line that another core has just
// read costs many times a store into a line no other core holds: the writer must first take
// the line back from the reader's cache, one line at a time. A large all_reduce writes such
// lines at every op: its finished slice, which the peers read out of its output at the last
// op, and, in place, the slices the peers read as input; so does an all_to_all that writes
// its blocks into its peers' outputs (torchrec's pooled embeddings: a peer's columns, in every
// row of an output the peer itself writes and reads: 1 MiB took 438 us with ordinary stores
// against 44 with streaming ones on the slow placement, 47 and about the same on the other). Measured on a 2-vCPU host, 512 KiB
// written after a peer read it: 52-230 us with ordinary stores, 18-19 us with streaming
// (non-temporal) stores, which do not take the line first. On other placements of the same
// host's cores the ordinary stores cost 6 us, and the streaming ones are the slower (the data
// goes to memory, and the peer's read then comes from there: 48 against 19 us for a write and
// the peer's read). The placement can change while a process runs, and nothing tells a
// process which one it is on, so the choice is measured: the kind in use stays while the
// other has not been clearly faster lately (kSwitchBelow of its cost), and the other is tried
// for kTryRun ops in a row in every kTryEvery to notice when the costs swap; for each size (in
// powers of two) and form (in place or not) apart, since a cost per byte holds for one of them
// only. A kind's cost is the least of its last kSamples ops: a preemption, or a turn of another
// rank on the same core, only ever makes an op slower, so one slow op decides nothing, where
// costs that did change show within kSamples ops. Only an op that follows one of the same kind
// counts: the first after a change of kind pays for, or profits from, where the last op's
// stores left the lines (in memory after streaming ones, in a cache after ordinary ones), which
// the kind's own ops in a row do not; counted, a try of ordinary stores after a run of
// streaming ones looked faster than it was, and the kinds took turns (a 1 MiB pooled
// all-to-all's writes into its peers' columns: a third of the ops streamed, at the cost of
// the slower kind throughout). Either kind gives the same bytes.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace ferry::detail::shm {

// Copies `bytes` from `from` to `to` with streaming stores where the CPU has them (else
// memcpy), and fences them: once it returns, the stores are ordered before any later store
// (such as the flag that tells the peers the data is there).
void stream_copy(void* to, const void* from, size_t bytes);
// stream_copy without the fence, for many pieces in a row; stream_fence() after the last.
void stream_copy_unfenced(void* to, const void* from, size_t bytes);
void stream_fence();

// The bytes of the largest cache the CPUs running this process share (the last level: L3 on
// most hosts), read once from /sys/devices/system/cpu/cpu0/cache; 0 when that cannot be read
// (sysconf's answer is not used: on virtual machines it can be the whole socket's cache,
// which the guest does not have to itself).
size_t last_level_cache_bytes();
// Makes last_level_cache_bytes() answer `bytes` from now on; returns what it answered before
// (tests: to take the streaming stores at sizes they can afford).
size_t set_last_level_cache_bytes_for_testing(size_t bytes);

// Whether an op whose writes on this host come to `bytes` in all should write with streaming
// stores: when they outgrow the last-level cache, none of the lines written is still cached
// when its reader comes to it, and an ordinary store first reads each line it writes.
inline bool writes_outgrow_cache(size_t bytes) {
  const size_t cache = last_level_cache_bytes();
  return cache > 0 && bytes > cache;
}

// A steady clock's nanoseconds, for the times a chooser records.
inline uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

class StoreChooser {
 public:
  static constexpr uint32_t kTryEvery = 32;
  static constexpr uint32_t kTryRun = 2;
  static constexpr double kSwitchBelow = 0.8;
  static constexpr int kSamples = 4;

  // Whether the next op writes with streaming stores.
  bool next_streaming();
  // One op's time for `bytes` with the kind of stores `streaming` says; the ops of a size and
  // form are recorded in the order they were chosen (counted only after one of the same kind).
  void record(bool streaming, uint64_t ns, size_t bytes);
  // The cost per byte that decides, for each kind (0: not measured yet).
  double cost(bool streaming) const;

 private:
  double samples_[2][kSamples] = {};  // ns per byte of each kind's last ops, 0: none yet
  uint32_t recorded_[2] = {0, 0};
  uint32_t ops_ = 0;
  bool streaming_ = false;  // the kind in use
  bool ran_ = false;        // an op was recorded, of the kind below
  bool ran_streaming_ = false;
};

// A StoreChooser per size class and form of an op.
class StoreChoosers {
 public:
  StoreChooser& of(size_t bytes, bool in_place) {
    const size_t size_class = bytes == 0 ? 0 : 63 - static_cast<size_t>(__builtin_clzll(bytes));
    return choosers_[size_class][in_place ? 1 : 0];
  }

 private:
  StoreChooser choosers_[64][2];
};

}  // namespace ferry::detail::shm
