// Small collectives as MPI-4 persistent requests (internal).
//
// Why: in MPICH 4.0 a non-blocking collective costs about 1.3 us more than the blocking call
// for 8 B on two ranks (MPI_Iallreduce + MPI_Test 2.5-2.9 us, MPI_Allreduce 1.3-1.6 us), while
// MPI_Start of a persistent request costs what the blocking call does (1.3-1.7 us) and still
// gives ferry a request it can test against a deadline.
//
// A persistent request is bound to its buffers, and creating one is a collective call, so:
//  - Only ops whose buffers are small (kMaxStagedBytes each way) take this path. They go through
//    staging buffers owned by the request: the caller's data is copied in before MPI_Start and
//    the result out once the request finished, which costs far less than the 1.3 us it saves.
//  - One request per key (op, count, datatype, reduction, root), created the first time the key
//    is seen and kept for the group's life, up to kMaxKeys keys; later keys take the
//    non-blocking call. Every rank issues the same collectives in the same order, so every rank
//    sees the same keys in the same order and creates the same requests at the same point: the
//    choice depends on nothing local to a rank (MPI matches persistent collectives only with
//    persistent ones, so ranks must never disagree).
//  - When a key's request is created, the ranks also compare their keys (mpi_call_key.h: one
//    small MPI_Iallgather posted beside the init, once per key and group, nothing per op), and the
//    request is first started only once the comparison agreed: MPI binds persistent
//    collectives to one another by the order of their init calls, so ranks that create
//    requests of different counts, datatypes, reductions or roots at the same point would be
//    bound together, and MPI would hand back wrong data without an error. A difference fails
//    the op with MismatchError on every rank, naming both calls, before any data moves. Ranks
//    that later start different existing keys are not bound together (MPICH 4.0.2: each
//    request waits for its own peers), and the op ends at its deadline with the engine's
//    diagnosis.
//  - A key's request carries one op at a time: an op whose key is still in flight first waits
//    for that earlier op, which every rank started before this one, so it can finish.
//  - The first start must not wait for its own request to be tested: a rank that started its
//    ops at issue may wait for a later op first, while a peer whose ops were queued on the
//    group's worker runs them one after another and waits in the first one for this rank's
//    MPI_Start; the later op's key check cannot finish before that peer gets to it, so each
//    would wait for the other until the deadline. A slot whose first start is due is therefore
//    listed process-wide and started, once its check agreed, from any ferry test of an MPI
//    request and from the process's progress thread (advance_persistent_first_starts).
//
// MPICH 4.0.2's persistent MPI_Allgather reads outside its buffers on two ranks (reproduced
// with guard pages around 8 B buffers: a segfault every run), so all_gather is carried as a
// persistent MPI_Alltoall whose send buffer holds W copies of the block; it moves the same
// bytes. FERRY_MPI_PERSISTENT=0 turns the path off (on every rank alike: a rank that makes the
// non-blocking call where its peers start a persistent request would never match them).
#pragma once

#include <ferry/backends/mpi/mpi_call_key.h>
#include <ferry/backends/native_collectives.h>

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace ferry::detail {

// Starts every slot whose first op waits only for its key check to agree (see the file
// comment); cheap (one atomic load) when there is none. Called by every ferry test of an MPI
// request, through advance_exchange_rounds.
void advance_persistent_first_starts();

class PersistentCollectives {
 public:
  static constexpr size_t kMaxStagedBytes = 8 * 1024;
  static constexpr size_t kMaxKeys = 64;

  // `comm` must outlive this object (the group's `coll` communicator).
  PersistentCollectives(MPI_Comm comm, int rank, int size, uint32_t group_id);
  ~PersistentCollectives();  // frees the requests that are not in flight
  PersistentCollectives(const PersistentCollectives&) = delete;
  PersistentCollectives& operator=(const PersistentCollectives&) = delete;

  // Each returns null when the op does not take this path; the caller then makes the
  // non-blocking call. Arguments as in NativeCollectives, with MPI's types already chosen.
  std::unique_ptr<NativeRequest> all_reduce(const void* in, void* out, int count,
                                            MPI_Datatype type, size_t element_bytes, MPI_Op op);
  // Equal blocks of `count` elements.
  std::unique_ptr<NativeRequest> reduce_scatter(const void* in, void* out, int count,
                                                MPI_Datatype type, size_t element_bytes,
                                                MPI_Op op);
  std::unique_ptr<NativeRequest> broadcast(void* buf, int bytes, int root);
  // Equal blocks of `block` bytes, contiguous in `out`; `in` may be this rank's block of `out`.
  std::unique_ptr<NativeRequest> all_gather(const void* in, void* out, int block);
  // Equal blocks of `block` bytes each way.
  std::unique_ptr<NativeRequest> all_to_all(const void* in, void* out, int block);
  std::unique_ptr<NativeRequest> barrier();

  struct Slot;  // one persistent request and its staging buffers (mpi_persistent.cpp)

 private:
  struct Key {
    CallKind kind;
    int count;
    MPI_Datatype type;
    MPI_Op op;
    int root;
    bool operator==(const Key&) const = default;
  };

  // The slot of a persistent MPI_Alltoall of `block` bytes per rank (all_gather and
  // all_to_all_single share the call; `kind` keeps their keys apart).
  std::shared_ptr<Slot> alltoall_slot(CallKind kind, int block);
  // The slot of `key`, created with `init` (which makes the persistent request over the
  // slot's staging buffers) when the key is new; null when the path is not taken.
  template <class Init>
  std::shared_ptr<Slot> slot_for(const Key& key, size_t send_bytes, size_t recv_bytes,
                                 Init&& init);
  // Posts the comparison of every rank's key for a new slot (see the file comment); the slot's
  // first op starts its request once the comparison agreed (Slot::start_when_agreed, from its
  // own test or any other, see the file comment), and fails with
  // MismatchError on every rank when it did not.
  void post_key_check(const Key& key, Slot& slot) const;
  // Starts the slot's request for one op: waits for the slot's previous op, copies
  // `copies` copies of `in` (send_bytes / copies bytes each) into the send staging, and
  // names `out` as where the result goes (null: nowhere).
  std::unique_ptr<NativeRequest> start(const char* what, std::shared_ptr<Slot> slot,
                                       const void* in, int copies, void* out);

  MPI_Comm comm_;
  int rank_;
  int size_;
  uint32_t group_id_;
  bool enabled_;
  std::vector<std::pair<Key, std::shared_ptr<Slot>>> slots_;  // in creation order
};

}  // namespace ferry::detail
