// The Work of an op started when it was issued (internal): a native collective whose transport
// request is in flight, a point-to-point exchange posted at issue, a send or a recv.
//
// Nobody runs such an op: it moves inside its transport's calls, so whoever tests or waits for
// it drives it, one thread at a time (the drive lock). The others wait for the op's completion
// in short slices, taking the drive lock when it is free, so that none of them sleeps while the
// op is left undriven. A wait that lasts at least the op's own deadline waits it out with the
// engine's diagnosis of absent ranks and poisoning (OpContext); a caller's shorter wait polls
// and leaves it in flight on expiry. A Work dropped before its op finished hands the op to the
// group's worker, which waits it out under the op's deadline: the transport still owns the
// buffers, and the peers wait for this rank's part.
#pragma once

#include <ferry/collectives/engine/group_impl.h>
#include <ferry/collectives/engine/op_description.h>
#include <ferry/runtime/work.h>

#include <array>
#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ferry::detail {

// The memory of the tensors an op started at issue reads or writes, kept alive until it
// finished: an input and an output, or up to three of each for an all-to-all of several parts
// (a KJT's lengths, values and weights). Held inline, so that keeping them costs no allocation.
inline constexpr size_t kMaxKeptBuffers = 6;
using KeptBuffers = std::array<std::shared_ptr<const void>, kMaxKeptBuffers>;

// What a failure of an op started at issue means beyond the op. Whether its buffers must also
// be kept for the life of the process is a separate fact, InFlight::buffers_kept(), which an op
// of any policy may answer yes: keeping them says nothing of whether the peers are told.
enum class OnFailure {
  // A native collective: the group is poisoned, and the buffers are kept for the life of the
  // process (the transport cannot withdraw a collective and may still write into them). The
  // op stays in flight after a caller gave up on it (give_up), and the peers are not told
  // (MPI, the one transport with native collectives, has no way to tell them).
  kPoisonKeepBuffers,
  // A collective that can be given up on this rank (posted point-to-point requests, withdrawn;
  // a shared-memory op, abandoned): the group is poisoned and, unless every rank times out by
  // itself, the peers are told at once, as a queued op does.
  kPoisonTellPeers,
  // A send or a recv: only the op fails (it takes no sequence number; the collectives stay in
  // step).
  kOpOnly,
};

// What an op started at issue still has in flight. Called only under its Work's drive lock.
class InFlight {
 public:
  virtual ~InFlight() = default;
  // Never blocks: true once the transport's part finished, either way. May throw the failure.
  virtual bool test() = 0;
  // Polls until finished (true) or `deadline` (false). May throw the failure.
  virtual bool poll_until(Clock::time_point deadline) = 0;
  // Waits under the op's own deadline with the engine's diagnosis of absent ranks; throws on
  // expiry, on a poisoned group and on failure.
  virtual void wait_to_the_end(GroupImpl& group, const char* op, uint64_t seq,
                               Clock::time_point deadline) = 0;
  // Once finished: throws the op's failure, or does what follows the transfer (combines the
  // payloads) and returns the op's outputs.
  virtual std::vector<Tensor> finish() = 0;
  virtual OnFailure on_failure() const = 0;
  // After a failure: whether something may still write into the op's buffers, which must then
  // be kept for the rest of the process: a receive that could not be withdrawn
  // (OpContext::buffers_kept), or peers that accepted to write into its output (a shared-memory
  // op). Independent of on_failure(): a shared-memory op that keeps them still tells its peers.
  virtual bool buffers_kept() const { return false; }
  // Whether a wait polls it for a few microseconds before setting up the full wait: a native
  // request mostly finishes within microseconds of being waited for. A point-to-point exchange
  // goes straight to its wait, which tells a withdrawn message from a peer's announced failure.
  virtual bool polls_first() const { return false; }
};

class InFlightWork : public WorkState, public InFlightNative {
 public:
  // `deadline`: the op's own (time_point::max() for an op that has none: send, recv).
  InFlightWork(OpDescription&& op, Clock::time_point deadline, std::unique_ptr<InFlight> pending,
               KeptBuffers&& keep);
  // Dropped before the op finished: the group's worker waits it out (see the top).
  ~InFlightWork() override;

  std::string description() const override { return op_.format(); }
  // A test tests the transport's part once (if no other thread drives it); a wait drives the
  // op (see the top); an expired wait gives up (give_up). Background progress (kNobody): the
  // group's worker drives the op to the end, as it would a queued one. The process's progress
  // thread would instead wake up every 50 us to 1 ms to test it; on a host with no core to
  // spare (2 ranks on 2 cores) those wake-ups took a core from a rank, and the KJT all-to-all
  // over MPI cost twice as long. On such a host the worker takes cores from the ranks too: the
  // op is then left to its waiter, and the progress thread first tests it after 10 ms (a
  // Work::then callback of an op nobody waits for still runs). An op without a deadline of its
  // own (a send, a recv) is left to the progress thread: the worker would wait for it without
  // bound.
  bool progress(Mover who, std::chrono::milliseconds timeout,
                const std::shared_ptr<WorkState>& self) override;
  void finish_before_group_ends(GroupImpl& group) override;

 protected:
  // The drive lock: held by the one thread that tests or waits on the op. An op that completes
  // under it only notes that its completion hooks are due; they run once the lock is let go, so
  // that a hook (a Work::then callback) may test or wait for this same Work, which takes the
  // lock again.
  class DriveLock {
   public:
    explicit DriveLock(const InFlightWork& work) : work_(const_cast<InFlightWork&>(work)) {}
    DriveLock(const DriveLock&) = delete;
    DriveLock& operator=(const DriveLock&) = delete;
    ~DriveLock() { unlock(); }
    void lock();
    bool try_lock();
    bool owns_lock() const { return held_; }
    // Lets go, then runs the hooks of an op that completed meanwhile.
    void unlock();

   private:
    // Throws when the calling thread holds the lock already: locking a std::mutex twice from
    // one thread is undefined behaviour, which this turns into an error naming the op.
    void refuse_second_lock() const;

    InFlightWork& work_;
    bool held_ = false;
  };

  // What a wait that expired does to the op, before the waiter's TimeoutError: the group is
  // poisoned with `why`; then, as a queued op does in a poisoned group, an exchange that can be
  // withdrawn (kPoisonTellPeers: posted requests, a shared-memory op) gives up (its wait sees
  // the poison within one slice) and tells the peers, so that they fail at once rather than at
  // their deadline, keeping its buffers if buffers_kept() says so. A native collective cannot be
  // withdrawn: it stays in flight for a later wait (or the group's end) to finish. A send or a
  // recv withdraws its message instead (point_to_point.cpp).
  virtual void give_up(const std::string& why);

  // For a Work with its own way of letting go (a send or a recv is withdrawn when dropped):
  // the op still in flight, taken under the drive lock; null once settled.
  std::unique_ptr<InFlight> take_pending();
  InFlight* pending() const { return pending_.get(); }  // drive lock held
  std::shared_ptr<GroupImpl> group_of_op() const { return op_.group.lock(); }

 private:
  // Tests the op once, unless another thread drives it; true once completed. With
  // `only_if_polled`, only an op whose wait would poll it first (InFlight::polls_first): a
  // point-to-point exchange is left to its wait, which tells a withdrawn message from a peer's
  // announced failure.
  bool test(bool only_if_polled = false);
  // Drives the op (or waits while another thread does) until it completed (true) or
  // `deadline` (false); `now`: the clock read the deadline came from.
  bool wait(Clock::time_point deadline, Clock::time_point now);
  // Takes the drive lock, or returns early: true with `drive` held, or false when the op
  // completed meanwhile (`completed`) or `deadline` passed.
  bool lock_drive(DriveLock& drive, Clock::time_point deadline, bool& completed);
  // The op finished: its outcome becomes the Work's (its hooks run when the lock is let go).
  // Drive lock held.
  void settle();
  // Waits under the op's deadline, as the worker's path does. Drive lock held.
  void drive_to_the_end(GroupImpl& group);
  void fail_op(std::exception_ptr error);
  // Done with the transfer: the caller then holds the only handles to its tensors.
  void release();

  OpDescription op_;  // formatted only when a message needs it
  Clock::time_point deadline_;
  mutable std::mutex drive_mu_;  // held by the one thread testing or waiting on pending_
  std::atomic<std::thread::id> driver_{};  // the thread holding drive_mu_, if any
  bool hooks_due_ = false;       // completed under the drive lock; guarded by it
  std::unique_ptr<InFlight> pending_;
  KeptBuffers keep_;  // released before the Work completes (see release)
};

// What `policy` does to the group after an op failed with `error`; returns the error the caller
// sees. `keep` is released, or kept for the life of the process when the transport may still
// use it.
std::exception_ptr after_failure(GroupImpl* group, std::exception_ptr error, OnFailure policy,
                                 KeptBuffers& keep);

}  // namespace ferry::detail
