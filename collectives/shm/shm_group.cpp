#include <ferry/collectives/shm/shm_group.h>

#include <ferry/collectives/engine/op_context.h>
#include <ferry/collectives/engine/reduce_kernels.h>
#include <ferry/runtime/config.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/log.h>
#include <ferry/runtime/progress.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include <sched.h>
#include <unistd.h>

namespace ferry::detail::shm {
namespace {

// How long a waiter spins (a core per rank) or yields (ranks outnumber cores) before it sleeps:
// a peer that runs answers within microseconds; one that does not is better waited for asleep.
// Where ranks outnumber cores, the peer a rank waits for is often one its yield hands the core
// to; a sleeper instead waits for its wake-up to be scheduled, tens of microseconds each time.
// At 4 ranks on 2 cores 80 us of yielding made 58 of 72 rows (8 B-16 MiB) faster than 20 us
// did (geometric mean 0.74x, 6 alternated rounds); 500 us was slower again.
constexpr auto kSpinFor = std::chrono::microseconds(50);
constexpr auto kYieldFor = std::chrono::microseconds(80);
// On a host whose ranks fill its cores, how long an op is left to the threads that wait for it
// before the progress thread first looks at it. Every look of that thread took a core from a
// rank: with a look per op, it woke about five times per DLRM step (2 MPI ranks on 2 cores),
// each time putting the rank's own thread off its core. An op nobody waits for (a rank that
// waits in its own MPI_Barrier meanwhile) still moves, this much later.
constexpr auto kFirstLook = std::chrono::milliseconds(10);
// A sleeper wakes at least this often to check its deadline, its peers' processes and the
// group's poison: a peer's death is noticed within about this long.
constexpr auto kSleepSlice = std::chrono::milliseconds(10);

static_assert(sizeof(Fingerprint) <= kFingerprintBytes);

// set_pause_before_reads_for_testing's hook.
std::atomic<void (*)(const char*)> g_pause_before_reads{nullptr};

// The progress thread's view of every group's shared-memory ops (GroupShm::poll_in_background):
// registered once, holding the groups weakly.
class ShmPoller final : public BackgroundPoller {
 public:
  static ShmPoller& get() {
    static auto* poller = [] {
      auto* p = new ShmPoller();  // lives as long as the process, as a poller must
      add_background_poller(p);
      return p;
    }();
    return *poller;
  }
  void watch(std::weak_ptr<GroupShm> g) {
    std::lock_guard<std::mutex> lock(mu_);
    groups_.push_back(std::move(g));
  }
  bool poll() override {
    std::lock_guard<std::mutex> lock(mu_);
    bool busy = false;
    std::erase_if(groups_, [&](const std::weak_ptr<GroupShm>& w) {
      std::shared_ptr<GroupShm> g = w.lock();
      if (!g) return true;
      busy = g->poll_in_background() || busy;
      return false;
    });
    return busy;
  }

 private:
  std::mutex mu_;
  std::vector<std::weak_ptr<GroupShm>> groups_;
};

}  // namespace

void set_pause_before_reads_for_testing(void (*pause)(const char* op)) {
  g_pause_before_reads.store(pause);
}

std::shared_ptr<GroupShm> GroupShm::of(GroupImpl& g, const OpRef& op) {
  // After the first op, without the group's lock: the pointer is set once and never cleared
  // while the group lives.
  if (void* known = g.shm_fast().load(std::memory_order_acquire))
    return static_cast<GroupShm*>(known)->shared_from_this();
  std::lock_guard<std::mutex> lock(g.shm_mutex());
  std::shared_ptr<void>& state = g.shm_state();
  if (state) return std::static_pointer_cast<GroupShm>(state);
  const int me = g.rank(), n = g.size();
  SharedSegment segment = SharedSegment::map_for_group(
      g, segment_bytes(n), op.seq, op.deadline, [&](void* base) {
        allow_peer_reads();
        if (me == 0) {
          Header* h = header_of(base);
          h->magic = kMagic;
          h->ranks = static_cast<uint32_t>(n);
          h->slot_bytes = static_cast<uint32_t>(kSlotBytes);
        }
        Slot* s = slot_of(base, me);
        s->pid = static_cast<int32_t>(getpid());
        s->segment_address = reinterpret_cast<uintptr_t>(base);
      });
  auto shm = std::shared_ptr<GroupShm>(new GroupShm(g, std::move(segment)));
  state = shm;
  g.shm_fast().store(shm.get(), std::memory_order_release);
  ShmPoller::get().watch(shm);
  // Every rank mapped the segment and wrote its pid and address before rank 0 said ready:
  // probe now, so that the first single-copy op finds every rank's answer published.
  shm->probe_peers();
  return shm;
}

GroupShm::GroupShm(GroupImpl& g, SharedSegment segment)
    : group_(&g), describe_(g.describe()), members_(g.members()), segment_(std::move(segment)),
      arenas_(g.size()), rank_(g.rank()), size_(g.size()) {
  std::vector<int> pids(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) pids[r] = slot(r)->pid;
  peers_ = PeerProcesses(pids, rank_);
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  const int on_host = std::max(size_, g.transport().ranks_on_host());
  oversubscribed_ = cores > 0 && on_host > cores;
  looked_at_late_ = g.ranks_fill_cores();
  FERRY_LOG(Info, "shm", g.describe(), ": shared-memory ops ready (", size_, " rank(s), ",
            oversubscribed_ ? "more ranks than cores: waits yield, then sleep"
                            : "a core per rank: waits spin, then sleep",
            ")");
}

GroupShm::~GroupShm() = default;

std::string GroupShm::who(int r) const {
  return str("rank ", r, " (world rank ", members_[static_cast<size_t>(r)], ", pid ",
             peers_.pid(r), ")");
}

void GroupShm::publish(std::atomic<uint32_t>& counter, uint32_t value) {
  // Sequentially consistent, with the sleeper's increment of `sleepers` before it reads the
  // counters: either the sleeper sees the new value, or this sees the sleeper and wakes it.
  counter.store(value, std::memory_order_seq_cst);
  Header* h = header();
  if (h->sleepers.load(std::memory_order_seq_cst) != 0) {
    h->epoch.fetch_add(1, std::memory_order_seq_cst);
    futex_wake_all(&h->epoch);
  }
}

void GroupShm::advance(std::atomic<uint32_t> Slot::*counter, uint32_t value) {
  // Every wait on `arrived` or `done` is for all ranks' counter to reach some number, and this
  // rank's moves up from its old value: its store can only complete a wait for a number after
  // that value, and the weakest of those waits is for every rank at old + 1. So the sleepers
  // are woken only when that holds. Where more ranks than cores share the host, the wakes of
  // the ranks that arrive before the last would each put every sleeper on a core to find that
  // it must sleep again. Of ranks that store at once, the last store's loads see the
  // others' (all sequentially consistent), so the rank that completes a wait always wakes.
  std::atomic<uint32_t>& mine = slot(rank_)->*counter;
  const uint32_t first_new = mine.load(std::memory_order_relaxed) + 1;
  mine.store(value, std::memory_order_seq_cst);
  Header* h = header();
  if (h->sleepers.load(std::memory_order_seq_cst) == 0) return;
  for (int r = 0; r < size_; ++r)
    if (!reached((slot(r)->*counter).load(std::memory_order_seq_cst), first_new)) return;
  h->epoch.fetch_add(1, std::memory_order_seq_cst);
  futex_wake_all(&h->epoch);
}

void GroupShm::arrive(uint32_t n, Clock::time_point issued) {
  advance(&Slot::arrived, n);
  // The progress thread reads for this rank when its thread waits on something else. Every op
  // wakes it (one atomic store and load while it is awake): a wake skipped because the thread
  // polled a moment ago was lost when it then went to sleep, and a rank that sat in its own
  // MPI_Barrier never read its part. The thread spaces the rounds that wakes ask for itself
  // (runtime/progress.cpp), so a stream of ops does not keep it polling back to back. Where the
  // ranks fill the cores, the round comes kFirstLook later.
  if (looked_at_late_) {
    wake_background_progress_at(issued + kFirstLook);
  } else {
    wake_background_progress();
  }
}

void GroupShm::give_up() {
  Header* h = header();
  int32_t none = 0;
  h->gave_up.compare_exchange_strong(none, rank_ + 1);
  h->epoch.fetch_add(1, std::memory_order_seq_cst);
  futex_wake_all(&h->epoch);
}

uint32_t GroupShm::begin(const OpRef& op) {
  const uint32_t n = next_ + 1;
  // Op n writes data[n % kDepth]: free once every rank is done with op n - kDepth. (For the
  // first kDepth ops the subtraction wraps to an op number every counter has "reached".)
  const uint32_t freed = n - kDepth;
  // The peers' `done` lines are read only when the last look does not free op n's buffer:
  // a look finds them done with the op before, which frees the next kDepth - 1 ops' buffers,
  // so most ops take no line from a peer here (it costs one hand-off each time it is read).
  auto free = [&] {
    uint32_t least = slot(0)->done.load(std::memory_order_acquire);
    for (int r = 1; r < size_; ++r) {
      const uint32_t d = slot(r)->done.load(std::memory_order_acquire);
      if (!reached(d, least)) least = d;
    }
    all_done_ = least;
    return reached(least, freed);
  };
  if (!reached(all_done_, freed) && !free() && !wait_for(free, op.deadline, op))
    fail_timeout(freed, op);
  next_ = n;
  return n;
}

GroupShm::Pending& GroupShm::push(uint32_t n, Kind kind, Clock::time_point issued) {
  FERRY_CHECK(tail_ - head_ < kRing, Error, "shared memory of ", describe_, ": more than ",
              kRing, " ops started and not completed (internal error)");
  Pending& p = ring_[tail_ % kRing];
  if (head_ == tail_) head_n_.store(n, std::memory_order_release);
  tail_ += 1;
  p = Pending{};  // every field as its default (the start sets what its op needs)
  p.n = n;
  p.kind = kind;
  p.started = issued;
  return p;
}

void GroupShm::sign(uint32_t n, const OpRef& op) {
  Slot* me = slot(rank_);
  const uint32_t b = n % kDepth;
  std::memcpy(me->fingerprint[b], op.fingerprint, sizeof(Fingerprint));
  me->call[b] = call_word(op.check, op.seq);  // last: on the counter line (see sign's callers)
}

void GroupShm::compare_calls(const Pending& p) {
  const uint32_t b = p.n % kDepth;
  const Slot* me = slot(rank_);
  for (int r = 0; r < size_; ++r) {
    const Slot* s = slot(r);
    if (r == rank_ || s->call[b] == me->call[b]) continue;
    Fingerprint mine, theirs;
    std::memcpy(&mine, me->fingerprint[b], sizeof mine);
    std::memcpy(&theirs, s->fingerprint[b], sizeof theirs);
    const char* what = theirs.well_formed() ? fingerprint_difference(mine, theirs) : nullptr;
    FERRY_THROW(MismatchError, mine.op, " (seq ", mine.seq, ") on rank ", rank_, " of ",
                describe_, ": the ranks called different collectives: rank ", rank_, " called ",
                mine.describe(), ", rank ", r, " called ", theirs.describe(), " (",
                what ? what : "the call", " differs; compared in shared memory before any data "
                "was read: this rank ", short_call(mine, size_), ", rank ", r, " ",
                theirs.well_formed() ? short_call(theirs, size_) : std::string("?"), ")");
  }
}

uint32_t GroupShm::start_barrier(const OpRef& op) {
  const uint32_t n = begin(op);
  {
    std::lock_guard<std::mutex> lock(mu_);
    push(n, Kind::Barrier, op.issued);
  }
  sign(n, op);
  arrive(n, op.issued);
  return n;
}

uint32_t GroupShm::start_all_reduce(const OpRef& op, std::span<const InputPiece> in, void* out,
                                    size_t count, DType dtype, ReduceOp reduce, size_t first,
                                    size_t block) {
  const size_t bytes = count * dtype_size(dtype);
  FERRY_CHECK(bytes <= kSlotBytes, Error, op.name, ": ", bytes, " B through shared memory, at "
              "most ", kSlotBytes, " (internal error: the op should have chosen another path)");
  const uint32_t n = begin(op);
  const bool small = bytes <= kSmallBytes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Pending& p = push(n, Kind::AllReduce, op.issued);
    p.small = small;
    p.out = out;
    p.first = first;
    p.count = block == kWhole ? count : block;
    p.dtype = dtype;
    p.reduce = reduce;
  }
  // The payload after the ring's lock, as the call (sign): a small one shares the counter line.
  unsigned char* to = small ? slot(rank_)->small[n % kDepth] : slot(rank_)->data[n % kDepth];
  for (const InputPiece& piece : in) {
    if (piece.bytes > 0) std::memcpy(to, piece.data, piece.bytes);
    to += piece.bytes;
  }
  sign(n, op);
  arrive(n, op.issued);
  return n;
}

void GroupShm::read_all_reduce(const Pending& p) {
  const size_t bytes = p.count * dtype_size(p.dtype);
  if (bytes == 0 || p.out == nullptr) return;
  const uint32_t b = p.n % kDepth;
  // Rank 0's payload, then every other rank's combined in rank order: the direct exchange's
  // order (algorithms/direct_all_reduce.cpp), so both paths give the same bits on every rank.
  const size_t at = p.first * dtype_size(p.dtype);
  auto input = [&](int r) -> const unsigned char* {
    return (p.small ? slot(r)->small[b] : slot(r)->data[b]) + at;
  };
  std::memcpy(p.out, input(0), bytes);
  for (int r = 1; r < size_; ++r) combine(p.out, p.out, input(r), p.count, p.dtype, p.reduce);
}

void GroupShm::abandon(std::exception_ptr why) {
  std::lock_guard<std::mutex> lock(mu_);
  abandon_locked(std::move(why));
}

void GroupShm::abandon_locked(std::exception_ptr why) {
  if (!failure_) failure_ = std::move(why);
  // Before the op's Work fails and its caller may reuse the buffers the peers read: a peer that
  // reads them after this store sees it in its check before it says done (progress).
  int32_t none = 0;
  header()->released.compare_exchange_strong(none, rank_ + 1, std::memory_order_seq_cst);
  abandoned_.store(true, std::memory_order_release);
  head_ = tail_;
  head_n_.store(0, std::memory_order_release);
}

bool GroupShm::reads_peers(Kind kind) {
  return kind == Kind::AllToAll || kind == Kind::ReduceSlice || kind == Kind::GatherSlices ||
         kind == Kind::ReduceBlock || kind == Kind::PullBlocks;
}

void GroupShm::pause_for_testing(const Pending& p) const {
  if (auto* pause = g_pause_before_reads.load(std::memory_order_relaxed)) pause(name_of(p));
}

void GroupShm::check_nobody_released(const Pending& p) {
  // Orders the reads above before the load: a peer stores `released` before its caller gets
  // its buffers back, so reads that saw any byte the caller wrote since see the store here.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  const int32_t released = header()->released.load(std::memory_order_seq_cst);
  if (released == 0 || released - 1 == rank_) return;
  // A peer that let go on another rank's death: name the rank that died (as a failed read does).
  const int32_t dead = header()->ended.load(std::memory_order_acquire);
  if (dead != 0)
    FERRY_THROW(PeerFailure, name_of(p), " (shm op ", p.n, ") on ", describe_, ": ",
                who(dead - 1), " ended while this rank read from its peers");
  FERRY_THROW(PeerFailure, name_of(p), " (shm op ", p.n, ") on ", describe_, ": ",
              who(released - 1), " failed the op while this rank read its buffers, which its "
              "caller may have written since, so the op fails here too");
}

void GroupShm::progress() {
  if (abandoned_.load(std::memory_order_acquire)) {
    if (failure_) std::rethrow_exception(failure_);
    FERRY_THROW(Error, "shared memory of ", describe_, ": an earlier op of the group failed on "
                "this rank; its shared-memory ops were abandoned");
  }
  while (head_ != tail_) {
    Pending& p = ring_[head_ % kRing];
    if (!p.read) {
      for (int r = 0; r < size_; ++r)
        if (!reached(slot(r)->arrived.load(std::memory_order_acquire), p.n)) return;
      // The second halves read what is final only once every rank did its first.
      if (p.kind == Kind::GatherSlices || p.kind == Kind::PullBlocks)
        for (int r = 0; r < size_; ++r)
          if (!reached(slot(r)->done.load(std::memory_order_acquire), p.n - 1)) return;
      try {
        compare_calls(p);
        if (reads_peers(p.kind) && p.kind != Kind::ReduceSlice) pause_for_testing(p);
        if (p.kind == Kind::AllReduce) read_all_reduce(p);
        if (p.kind == Kind::AllToAll) read_all_to_all(p);
        if (p.kind == Kind::ReduceSlice) read_reduce_slice(p);
        if (p.kind == Kind::GatherSlices) read_gather_slices(p);
        if (p.kind == Kind::Gather) read_gather(p);
        if (p.kind == Kind::ReduceBlock) read_reduce_block(p);
        if (p.kind == Kind::PushBlocks) read_push_blocks(p);
        if (p.kind == Kind::PullBlocks) read_pull_blocks(p);
        // A peer's failure after this rank arrived (its own deadline, which tells nobody, or a
        // death it noticed first) may have handed its buffers back while they were read.
        if (reads_peers(p.kind)) check_nobody_released(p);
      } catch (...) {
        give_up();  // this rank will never say done: its peers must not wait for it
        abandon_locked(std::current_exception());
        throw;
      }
      p.read = true;
      advance(&Slot::done, p.n);
    }
    // An all_to_all's peers read this rank's buffer, or write into its outputs: they are the
    // caller's again only once they all said done.
    if ((p.kind == Kind::AllToAll && (!p.sends_in_slot || p.accepts)) ||
        p.kind == Kind::GatherSlices || p.kind == Kind::ReduceBlock ||
        p.kind == Kind::PullBlocks)
      for (int r = 0; r < size_; ++r)
        if (!reached(slot(r)->done.load(std::memory_order_acquire), p.n)) return;
    head_ += 1;
    completed_.store(p.n, std::memory_order_release);
    head_n_.store(head_ != tail_ ? ring_[head_ % kRing].n : 0, std::memory_order_release);
  }
}

bool GroupShm::poll_in_background() {
  if (abandoned_.load(std::memory_order_acquire)) return false;
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return true;  // its owner is progressing it
  if (looked_at_late_ && head_ != tail_) {
    // Left to its waiters until the oldest op is kFirstLook old; the thread comes back then.
    const Clock::duration age = Clock::now() - ring_[head_ % kRing].started;
    if (age < kFirstLook) {
      wake_background_progress_after(
          std::chrono::duration_cast<std::chrono::microseconds>(kFirstLook - age) +
          std::chrono::microseconds(1));
      return false;
    }
  }
  try {
    progress();
  } catch (...) {
  }
  return head_ != tail_;
}

bool GroupShm::test(uint32_t n) {
  if (reached(completed_.load(std::memory_order_acquire), n)) return true;
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (lock.owns_lock()) progress();  // else another thread is progressing the group's ops
  return reached(completed_.load(std::memory_order_acquire), n);
}

bool GroupShm::wait(uint32_t n, Clock::time_point until, const OpRef& op) {
  return wait_for([&] { return reached(completed_.load(std::memory_order_acquire), n); }, until,
                  op);
}

void GroupShm::check_peers_or_throw(const OpRef& op) {
  if (group_->poisoned()) {
    give_up();
    group_->throw_if_poisoned(op.name);
  }
  const int32_t gave_up = header()->gave_up.load(std::memory_order_acquire);
  if (gave_up != 0 && gave_up - 1 != rank_) {
    // A rank that gave up because a process ended recorded that death before its give-up (as a
    // failed read names it too): the rank that died is named, not the one that let go.
    const int32_t dead = header()->ended.load(std::memory_order_acquire);
    if (dead != 0)
      FERRY_THROW(PeerFailure, op.name, " seq ", op.seq, " on ", describe_, ": ", who(dead - 1),
                  " ended while this rank waited for it in shared memory");
    FERRY_THROW(PeerFailure, op.name, " seq ", op.seq, " on ", describe_, ": ",
                who(gave_up - 1), " gave up on the group (its op failed) while this rank ",
                "waited in shared memory");
  }
  if (op.ctx != nullptr) {
    if (const std::string gone = op.ctx->departed_peer(); !gone.empty())
      FERRY_THROW(PeerFailure, op.name, " (seq ", op.seq, ") on ", describe_, ": ", gone);
  }
  const int ended = peers_.first_ended();
  if (ended >= 0) {
    // The death a rank recorded first is named: a peer that noticed it, failed its op and
    // ended in turn is no cause, though it may come first in rank order.
    int32_t recorded = 0;
    if (header()->ended.compare_exchange_strong(recorded, ended + 1)) recorded = ended + 1;
    FERRY_THROW(PeerFailure, op.name, " seq ", op.seq, " on ", describe_, ": ",
                who(recorded - 1), " ended while this rank waited for it in shared memory");
  }
}

bool GroupShm::wait_for(FunctionRef<bool()> ready, Clock::time_point until, const OpRef& op) {
  auto check = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    progress();
    return ready();
  };
  // Whether the oldest started op may move now, read without the lock: the spin reads only the
  // peers' counters until one changed, and takes the lock once it can act.
  auto may_move = [&] {
    const uint32_t head = head_n_.load(std::memory_order_acquire);
    if (head == 0) return true;
    for (int r = 0; r < size_; ++r)
      if (!reached(slot(r)->arrived.load(std::memory_order_acquire), head)) return false;
    return true;
  };
  if (check()) return true;
  const Clock::duration spin_for = oversubscribed_ ? Clock::duration(kYieldFor)
                                                   : Clock::duration(kSpinFor);
  // The spin's time is counted from its first look at the clock, 64 pauses in on a core of
  // its own (a few microseconds): most small ops end before it, and a clock read here cost
  // about a tenth of an 8-byte all_reduce.
  Clock::time_point spin_start{};
  for (int i = 1;; ++i) {
    // One pause (~40-140 cycles), not more: the hand-off is noticed at most that late.
    if (oversubscribed_)
      sched_yield();
    else
      cpu_relax();
    if ((ready() || may_move()) && check()) return true;
    if (oversubscribed_ || (i & 63) == 0) {
      const Clock::time_point now = Clock::now();
      if (spin_start == Clock::time_point{}) spin_start = now;
      if (now - spin_start >= spin_for || now >= until) break;
    }
  }
  Header* h = header();
  for (;;) {
    const Clock::time_point now = Clock::now();
    if (now >= until) return check();
    h->sleepers.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t epoch = h->epoch.load(std::memory_order_seq_cst);
    bool ok = false;
    try {
      ok = check();
      if (!ok) futex_wait(&h->epoch, epoch, std::min<Clock::duration>(until - now, kSleepSlice));
    } catch (...) {
      h->sleepers.fetch_sub(1, std::memory_order_seq_cst);
      throw;
    }
    h->sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (ok || check()) return true;
    // A peer that published and then ended did its part: look again before blaming it.
    try {
      check_peers_or_throw(op);
    } catch (...) {
      bool done = false;
      try {
        done = check();
      } catch (...) {
      }
      if (done) return true;
      abandon(std::current_exception());
      throw;
    }
  }
}

std::string GroupShm::not_arrived(uint32_t n) const {
  std::string absent, reading;
  // Those furthest behind: a rank that arrived but stopped before reading holds the others
  // in the reads that wait for it (a large all_reduce's second half waits for every first).
  uint32_t least_done = n;
  for (int r = 0; r < size_; ++r) {
    const uint32_t d = slot(r)->done.load(std::memory_order_acquire);
    if (!reached(d, least_done)) least_done = d;
  }
  for (int r = 0; r < size_; ++r) {
    if (!reached(slot(r)->arrived.load(std::memory_order_acquire), n))
      absent += (absent.empty() ? "" : ", ") + std::to_string(r);
    else if (slot(r)->done.load(std::memory_order_acquire) == least_done && least_done != n)
      reading += (reading.empty() ? "" : ", ") + std::to_string(r);
  }
  if (!absent.empty()) return " group rank(s) " + absent + " did not arrive in shared memory;";
  if (!reading.empty())
    return " group rank(s) " + reading + " did not finish reading in shared memory;";
  return "";
}

void GroupShm::fail_timeout(uint32_t n, const OpRef& op) {
  abandon();
  std::string absent, reading;
  for (int r = 0; r < size_; ++r) {
    if (!reached(slot(r)->arrived.load(std::memory_order_acquire), n))
      absent += (absent.empty() ? "" : ", ") + std::to_string(r);
    else if (!reached(slot(r)->done.load(std::memory_order_acquire), n))
      reading += (reading.empty() ? "" : ", ") + std::to_string(r);
  }
  FERRY_THROW(OwnDeadlineExpired, op.name, " seq ", op.seq, " on ", describe_,
              " timed out in shared memory (deadline FERRY_TIMEOUT = ", default_timeout().count(),
              " ms); ", absent.empty() ? "" : "group rank(s) " + absent + " did not arrive",
              absent.empty() && !reading.empty() ? "group rank(s) " + reading +
                                                       " did not finish reading"
                                                 : "",
              absent.empty() && reading.empty() ? "every rank arrived (a wait too short)" : "");
}

}  // namespace ferry::detail::shm
