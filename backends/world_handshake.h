// The two moments every rank of a job meets outside any group's collectives: the end of
// ferry::init() and the start of ferry::finalize() (internal).
//
// Each is a handshake over the transport's own point-to-point: every rank sends a zero-byte
// message to every other rank and waits for one from each. After the Open handshake every pair
// of ranks has exchanged a message, so every connection is wired up (UCX attaches a peer's
// shared memory on the first message, which fails once that peer has ended) and an early exit
// can only be an ordinary peer failure. After the Close handshake every rank knows that no
// peer will send it anything more: a peer that ends from then on has finished, not failed.
#pragma once

#include <ferry/backends/transport.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ferry::detail {

enum class Handshake : uint32_t { Open = 0, Close = 1, HostKeys = 2 };

// Until `deadline`. Throws TimeoutError naming the ranks not heard from, or PeerFailure when a
// peer ended (or gave up) before it took part. A send whose peer was heard from may fail (that
// peer may end as soon as it heard from everyone); it is not an error.
void world_handshake(Transport& transport, Handshake which, Clock::time_point deadline);

// Every rank sends every other its host key (host_identity.h) and keeps theirs in the transport
// (Transport::set_host_keys): then each group knows which of its ranks share a host, for the
// collectives' shared-memory path. Group::world calls it, on every transport but the local one
// (whose ranks are threads of one process), once per transport: it is as collective as making
// the world group. Until `deadline`; throws as world_handshake does.
void exchange_host_keys(Transport& transport, Clock::time_point deadline);

}  // namespace ferry::detail

namespace ferry::detail {

// How far a rank got in one group when it entered finalize: it issued `issued` collectives
// (sequence numbers 0 .. issued - 1) on group `group`, whose members are the world ranks
// `members` (a split gives every color the same id, so the id alone does not say who shares it).
struct GroupProgress {
  uint32_t group = 0;
  uint64_t issued = 0;
  std::vector<int> members;
  // An op of the group failed on this rank, which raised the error there already;
  // `failed_waiting_for` is the world rank of the member that ended (or entered finalize)
  // without issuing that op, when that is why it failed (-1 otherwise): the failure is then
  // the other rank's doing, and that rank was told nothing.
  bool failed = false;
  int failed_waiting_for = -1;
};

// Where two ranks' progress on one group they share shows that they did not issue the same
// collectives: "" when it does not, else what differs, naming both ranks and counts. Compared
// only where no error was raised yet: both groups healthy, or `b`'s failed waiting for `a`,
// which ended having issued fewer and is healthy (then `a` is the rank out of step and was told
// nothing; `b`'s PeerFailure named it). A rank that issued nothing combined nothing: its peers'
// PeerFailure says it all.
std::string progress_mismatch(int a, const GroupProgress& ga, int b, const GroupProgress& gb);

// Finalize's handshake, watched for from the end of init() on: a rank that enters finalize
// (called, or at exit after main returned) sends every peer the progress of each of its groups;
// each rank has a receive for it posted from init on, so that a peer still waiting in a
// collective that the finalizing rank never issued learns at once that it never will, instead of
// waiting for its deadline (OpContext asks departed_before between the slices of its waits).
// Exact, whatever the timing: a collective the finalizing rank did issue finished there before
// finalize began, and its messages arrive as usual.
class CloseWatch {
 public:
  // Posts the receives. After the Open handshake, on a world of more than one rank.
  explicit CloseWatch(std::shared_ptr<Transport> transport);
  ~CloseWatch();  // withdraws the receives that never finished
  CloseWatch(const CloseWatch&) = delete;
  CloseWatch& operator=(const CloseWatch&) = delete;

  // When world rank `peer` entered finalize without issuing collective `seq` of group `group`:
  // why, for a PeerFailure; otherwise (it did issue it, or has not finalized, or cannot tell) "".
  // Tests the peer's receive (non-blocking); safe from any thread.
  std::string departed_before(uint32_t group, int peer, uint64_t seq);

  // The Close handshake: sends `mine` to every peer and waits for every peer's until `deadline`;
  // throws as world_handshake does (TimeoutError naming the ranks not heard from, PeerFailure).
  // Once every peer was heard from, returns "" or, when a peer's progress on a group both hold
  // differs from this rank's (progress_mismatch), what differs: the handshake itself completed,
  // so the caller closes the transport as usual and raises MismatchError afterwards.
  std::string close(const std::vector<GroupProgress>& mine, Clock::time_point deadline);
  // A rank whose world is poisoned ends without the handshake but still tells every peer that
  // it finalized (so that a peer in the handshake, or waiting for it, does not wait for its
  // deadline); waits for its sends at most until `deadline`, and no longer than 50 ms after the
  // last of them completed (the rest go to peers not taking messages); failures ignored.
  void notify(const std::vector<GroupProgress>& mine, Clock::time_point deadline);
  // After close() returned: whether a peer's message came from notify(), so that every rank,
  // whether its own world failed or it only heard of it, ends the job's way after a failure
  // alike (MPI: mpi_finalize's peers_closed).
  bool peer_world_failed();

 private:
  struct Payload;
  void send_all(const std::vector<GroupProgress>& mine, uint32_t flags);
  void poll_locked(int peer);
  // progress_mismatch of `mine` against every heard-from peer's payload: "" or the first.
  std::string compare_progress_locked(const std::vector<GroupProgress>& mine) const;

  std::shared_ptr<Transport> transport_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Request>> recvs_;  // by world rank; null for this rank
  std::vector<std::unique_ptr<Request>> sends_;
  std::vector<std::vector<char>> got_;           // the peers' payloads
  std::vector<char> sent_;
  std::vector<int> state_;                       // 0 pending, 1 arrived, 2 failed
  bool peer_world_failed_ = false;
};

// The process's watch while a world of more than one rank is up (set by init, cleared by
// finalize); null otherwise.
void set_close_watch(std::shared_ptr<CloseWatch> watch);
std::shared_ptr<CloseWatch> close_watch();

}  // namespace ferry::detail
