// The state behind a Group handle (internal).
#pragma once

#include <ferry/backends/native_collectives.h>
#include <ferry/backends/transport.h>
#include <ferry/backends/world_handshake.h>
#include <ferry/collectives/algorithm_table.h>
#include <ferry/collectives/engine/executor.h>
#include <ferry/collectives/engine/scratch_arena.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::detail {

class GroupImpl;

// A collective started at issue (in_flight_work.h): it lives in its Work, not in the group's
// queue, so the group must see it finished before it ends (and before MPI is finalized).
class InFlightNative {
 public:
  virtual ~InFlightNative() = default;
  // Waits for the op under its deadline (or gives it up as a timed-out op does).
  virtual void finish_before_group_ends(GroupImpl& group) = 0;
};

class GroupImpl {
 public:
  // `native`: the transport's collectives for this group, or null (see native_collectives.h).
  GroupImpl(std::shared_ptr<Transport> transport, std::vector<int> members, int rank, uint32_t id,
            std::shared_ptr<NativeCollectives> native = nullptr);
  ~GroupImpl();

  Transport& transport() { return *transport_; }
  const Transport& transport() const { return *transport_; }
  NativeCollectives* native() const { return native_.get(); }
  const std::shared_ptr<Transport>& transport_ptr() const { return transport_; }
  const std::vector<int>& members() const { return members_; }
  int rank() const { return rank_; }
  int size() const { return static_cast<int>(members_.size()); }
  uint32_t id() const { return id_; }
  uint64_t sequence_number() const { return seq_.load(); }
  uint64_t take_sequence_number() { return seq_.fetch_add(1); }

  // "group 2 [world 0,2] rank 1/2"
  std::string describe() const;

  // The first failure poisons the group; every later op fails at once with an error of the
  // same type that quotes it.
  void poison(std::exception_ptr cause, const std::string& why);
  bool poisoned() const { return poisoned_.load(); }
  // An op failed because the member of world rank `peer` ended (or entered finalize) without
  // issuing it: that member issued fewer collectives. The first one is kept, for finalize's
  // and run_ranks's progress check (GroupProgress::failed_waiting_for, world_handshake.h).
  void note_member_ended(int peer) {
    int none = -1;
    ended_member_.compare_exchange_strong(none, peer);
  }
  int ended_member() const { return ended_member_.load(); }
  GroupProgress progress() const {
    return {id_, seq_.load(), members_, poisoned(), poisoned() ? ended_member() : -1};
  }
  std::string poison_reason() const;
  // Called on every op's issue and run: a view, so that an op name past the string's inline
  // capacity ("all_to_all_single") is not copied to the heap on the way.
  void throw_if_poisoned(std::string_view op) const;

  std::mutex& issue_mutex() { return issue_mu_; }
  void track_in_flight(std::weak_ptr<InFlightNative> op);
  // Finishes every op of this group that is started or queued, each under its own deadline
  // (finalize leaves nothing in flight to the transport's end, dropped Works included).
  void finish_outstanding();
  ScratchArena& scratch() { return scratch_; }
  Executor& executor() { return executor_; }

  // Whether every member runs on this rank's host (Transport::host_key, learnt in init's
  // handshake): the algorithm table's shared-memory rows apply. False while the transport
  // cannot tell (before the handshake, the local transport, a world made outside init).
  bool one_host() const { return placement() == Placement::OneHost; }
  // Where the members run (algorithm_table.h): one host, several hosts some of which hold
  // several members (the hierarchical rows apply), or Unknown while the transport cannot tell.
  Placement placement() const;
  // Whether this host's ranks fill its cores (the transport knows how many share the host, and
  // they are at least as many as its cores): a thread of ferry's beside a rank's own can then
  // run only by taking the core of a rank. Fixed for the group's life.
  bool ranks_fill_cores() const { return ranks_fill_cores_; }
  // The group's shared-memory state (collectives/shm/), made by its first shared-memory op
  // under shm_mutex(). Opaque here: the engine comes before the folder that defines it. It
  // outlives the group's ops (declared before the executor, which goes first).
  std::mutex& shm_mutex() { return shm_mu_; }
  std::shared_ptr<void>& shm_state() { return shm_; }
  // The same state, read without the lock once it is made (set once, never cleared).
  std::atomic<void*>& shm_fast() { return shm_fast_; }

  // How many ops of collective `c` this group ran with algorithm `a`: the record of which
  // algorithm the table's choice dispatched to, read by tests and diagnostics. Per group, so
  // that ranks sharing a process (the local transport) keep their own counts.
  void count_run(Collective c, Algorithm a) {
    runs_[static_cast<size_t>(c)][static_cast<size_t>(a)].fetch_add(1, std::memory_order_relaxed);
  }
  uint64_t runs(Collective c, Algorithm a) const {
    return runs_[static_cast<size_t>(c)][static_cast<size_t>(a)].load(std::memory_order_relaxed);
  }

 private:
  // How long a queued native op waits for a caller to run it before the worker does.
  static std::chrono::microseconds caller_first_grace(bool ranks_fill_cores);
  static bool host_full(const Transport& transport);

  std::shared_ptr<Transport> transport_;
  std::shared_ptr<NativeCollectives> native_;
  std::vector<int> members_;
  bool ranks_fill_cores_ = false;
  int rank_;
  uint32_t id_;
  std::atomic<uint64_t> seq_{0};
  std::mutex issue_mu_;  // taking a sequence number and queueing the op are one step
  std::mutex in_flight_mu_;
  std::vector<std::weak_ptr<InFlightNative>> in_flight_;

  std::array<std::array<std::atomic<uint64_t>, kAlgorithmCount>, kCollectiveCount> runs_{};

  std::atomic<bool> poisoned_{false};
  std::atomic<int> ended_member_{-1};
  mutable std::mutex poison_mu_;
  std::exception_ptr poison_cause_;
  std::string poison_why_;

  void finish_in_flight();

  mutable std::atomic<int> placement_{-1};  // -1 not known yet, else a Placement
  std::mutex shm_mu_;
  std::shared_ptr<void> shm_;
  std::atomic<void*> shm_fast_{nullptr};

  ScratchArena scratch_;
  Executor executor_;  // last: destroyed first, so queued ops finish while the rest still lives
};

// A new group, known to finish_every_group() while it lives.
std::shared_ptr<GroupImpl> make_group_impl(std::shared_ptr<Transport> transport,
                                           std::vector<int> members, int rank, uint32_t id,
                                           std::shared_ptr<NativeCollectives> native);
// finish_outstanding() on every live group of this process, in creation order.
void finish_every_group();
// How many collectives each live group over `world` (a transport) has issued, for finalize's
// handshake (world_handshake.h's CloseWatch).
std::vector<GroupProgress> group_progress(const Transport& world);

}  // namespace ferry::detail
