// ferry::detail::StageBits: how far one asynchronous request went (req_wait.h), as bits that
// a completion callback may set after the request is gone (internal; not installed).
//
// The collectives' completion callbacks run on whoever completes them (a group's worker, the
// progress thread), possibly after the request that launched them was dropped; so what they set
// must outlive the request. A shared_ptr to the bits did that, but a std::function holding a
// shared_ptr is not kept inline: a heap block per callback, two per request with its backward.
// Here the bits live in a slot that is never freed (slots are reused, a thread's own first):
// a callback holds the slot's address and the stamp it was given, 16 trivially copyable bytes
// that std::function keeps inline, and sets its bit only while the slot still carries that
// stamp. The owner moves the stamp on when it lets the slot go and when it starts a new
// gradient collective (a late callback of the previous one must not mark the new one done).
#pragma once

#include <atomic>
#include <cstdint>
#include <type_traits>

namespace ferry::detail {

class StageBits {
 public:
  enum Bit : uint8_t {
    kLaunched = 1 << 0,
    kCompleted = 1 << 1,
    kWaited = 1 << 2,
    kGradientLaunched = 1 << 3,
    kGradientCompleted = 1 << 4,
    kGradientWaited = 1 << 5,
  };

  // One word per slot: the stamp above the low 8 bits, the request's bits in them. A stamp
  // moves by one per renewal, so 56 bits never wrap.
  struct Slot {
    std::atomic<uint64_t> word{0};
  };

  // What a callback holds: sets `bit` if the slot still carries `stamp` (one compare-exchange
  // loop, so a slot renewed meanwhile is never written).
  struct Ticket {
    Slot* slot;
    uint64_t stamp;
    void set(Bit bit) const;
  };
  static_assert(std::is_trivially_copyable_v<Ticket> && sizeof(Ticket) <= 16,
                "a lambda holding a Ticket must fit std::function's inline buffer");

  StageBits();   // takes a slot (this thread's spare, else the process's, else a new one)
  ~StageBits();  // moves the stamp on, so late callbacks miss, and gives the slot back
  StageBits(const StageBits&) = delete;
  StageBits& operator=(const StageBits&) = delete;

  void set(Bit bit) { slot_->word.fetch_or(bit, std::memory_order_acq_rel); }
  bool has(Bit bit) const { return (slot_->word.load(std::memory_order_acquire) & bit) != 0; }
  // For a callback of what is in flight now.
  Ticket ticket() const { return Ticket{slot_, slot_->word.load(std::memory_order_acquire) >> 8}; }
  // Clears `bits` and moves the stamp on: tickets handed out before set nothing any more.
  void renew(uint8_t bits);

 private:
  Slot* slot_;
};

}  // namespace ferry::detail
