#include <ferry/collectives/differentiable/stage_bits.h>

#include <cstddef>
#include <mutex>
#include <vector>

namespace ferry::detail {
namespace {

using Slot = StageBits::Slot;

constexpr uint64_t kBitsMask = 0xff;
constexpr size_t kChunk = 64;       // slots made at once, when no spare is left anywhere
constexpr size_t kThreadKeeps = 64;  // spares a thread keeps; more go to the process's list

// Spares that no thread keeps: those a full thread list could not take, and those of threads
// that ended. Never destroyed: a request may be dropped while statics are.
struct Depot {
  std::mutex mu;
  std::vector<Slot*> slots;
};
Depot& depot() {
  static auto* d = new Depot();
  return *d;
}

// A thread's spares. A request is nearly always made and dropped on the thread that owns its
// tape, so taking and giving back costs no lock. Trivially destructible state, so a slot given
// back while the thread's statics are destroyed finds the list gone and goes to the depot.
enum class ListState : unsigned char { kNotYet, kAlive, kGone };
ListState& list_state() {
  static thread_local ListState s = ListState::kNotYet;
  return s;
}
struct ThreadList {
  ThreadList() {
    list_state() = ListState::kAlive;
    slots.reserve(kThreadKeeps);
  }
  ~ThreadList() {
    list_state() = ListState::kGone;
    std::lock_guard<std::mutex> lock(depot().mu);
    depot().slots.insert(depot().slots.end(), slots.begin(), slots.end());
  }
  std::vector<Slot*> slots;
};
ThreadList* thread_list() {
  if (list_state() == ListState::kGone) return nullptr;
  static thread_local ThreadList list;
  return &list;
}

Slot* take_slot() {
  ThreadList* mine = thread_list();
  if (mine != nullptr && !mine->slots.empty()) {
    Slot* s = mine->slots.back();
    mine->slots.pop_back();
    return s;
  }
  {
    std::lock_guard<std::mutex> lock(depot().mu);
    if (!depot().slots.empty()) {
      Slot* s = depot().slots.back();
      depot().slots.pop_back();
      return s;
    }
  }
  // Never freed: a callback may still look at a slot after its request let it go.
  Slot* chunk = new Slot[kChunk];
  if (mine != nullptr) {
    for (size_t i = 1; i < kChunk; ++i) mine->slots.push_back(&chunk[i]);
  } else {
    std::lock_guard<std::mutex> lock(depot().mu);
    for (size_t i = 1; i < kChunk; ++i) depot().slots.push_back(&chunk[i]);
  }
  return &chunk[0];
}

void give_slot(Slot* s) {
  ThreadList* mine = thread_list();
  if (mine != nullptr && mine->slots.size() < kThreadKeeps) {
    mine->slots.push_back(s);
    return;
  }
  std::lock_guard<std::mutex> lock(depot().mu);
  depot().slots.push_back(s);
}

}  // namespace

void StageBits::Ticket::set(Bit bit) const {
  uint64_t word = slot->word.load(std::memory_order_acquire);
  while ((word >> 8) == stamp && (word & bit) == 0) {
    if (slot->word.compare_exchange_weak(word, word | bit, std::memory_order_acq_rel)) return;
  }
}

StageBits::StageBits() : slot_(take_slot()) {}

StageBits::~StageBits() {
  renew(static_cast<uint8_t>(kBitsMask));
  give_slot(slot_);
}

void StageBits::renew(uint8_t bits) {
  uint64_t word = slot_->word.load(std::memory_order_acquire);
  uint64_t next;
  do {
    next = (((word >> 8) + 1) << 8) | (word & kBitsMask & ~static_cast<uint64_t>(bits));
  } while (!slot_->word.compare_exchange_weak(word, next, std::memory_order_acq_rel));
}

}  // namespace ferry::detail
