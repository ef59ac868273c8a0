// A POSIX shared-memory segment mapped by every rank of a group that shares a host, and left
// nowhere in /dev/shm (internal).
//
// Made by a collective exchange over the group's transport, the way MPICH's POSIX shared-memory
// module does it: the group's rank 0 creates the segment under a name unique to the job and the
// moment (its pid, the group id, 64 random bits), sends the name to the others, each maps it and
// confirms, and rank 0 removes the name (shm_unlink) as soon as every rank confirmed. The memory
// then lives only as long as some rank maps it: a rank that crashes, even by SIGKILL, leaves
// nothing behind once the others unmapped it, and nothing is ever left in /dev/shm except
// during those few microseconds of the exchange (a rank 0 killed between creating the name and
// removing it is the one case that leaks; a peer that sees the exchange fail removes the name
// too). Every wait has the op's deadline; a rank that cannot create or map the segment fails the
// exchange on every rank, with the reason.
#pragma once

#include <ferry/collectives/engine/group_impl.h>

#include <cstddef>
#include <functional>

namespace ferry::detail::shm {

class SharedSegment {
 public:
  SharedSegment() = default;
  SharedSegment(SharedSegment&& other) noexcept;
  SharedSegment& operator=(SharedSegment&& other) noexcept;
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;
  ~SharedSegment();  // unmaps it

  // Collective: every rank of `g` calls it for the same op (sequence number `seq`, whose tags
  // its messages use) with the same `bytes`. The segment starts zeroed; `on_mapped(base)` runs
  // on each rank once it mapped the segment and before it confirms, so what a rank writes
  // there is visible to every rank once this returns. Throws TimeoutError (a rank did not take
  // part before `deadline`), PeerFailure (a rank ended), TransportError (a rank could not create
  // or map it: the message says which and why).
  static SharedSegment map_for_group(GroupImpl& g, size_t bytes, uint64_t seq,
                                     Clock::time_point deadline,
                                     const std::function<void(void*)>& on_mapped);

  void* base() const { return base_; }
  size_t bytes() const { return bytes_; }

  // Whether /dev/shm holds a segment name of ferry's made by process `creator` (0: any
  // process). For tests: none should be left after any exchange, successful or not.
  static bool names_left_in_dev_shm(int creator = 0);
  // The prefix of every segment's name in /dev/shm.
  static constexpr const char* kNamePrefix = "ferry-shm-";

 private:
  SharedSegment(void* base, size_t bytes) : base_(base), bytes_(bytes) {}
  void* base_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace ferry::detail::shm
