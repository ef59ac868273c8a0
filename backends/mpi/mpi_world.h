// The MPI state one transport shares with the collectives of its groups (internal).
//
// Each group owns two communicators with the group's ranks in group order: `coll` carries its
// native collectives (and, MPI tag = step, the messages of any algorithm run over point to
// point); `side` carries the user's send/recv (MPI tag = the user's tag), the exchange that
// names absent ranks after a timeout (MPI tag = TAG_UB, which user tags cannot reach) and
// the splits; the world handshakes of init and finalize take TAG_UB on the world's `coll`.
// Separate communicators keep the user's tags from ever matching ferry's own messages, and
// MPI's per-communicator ordering replaces the sequence number in the Tag: a group's ops run
// one after another, so their messages are posted in sequence order.
#pragma once

#include <ferry/backends/transport.h>

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ferry::detail {

struct MpiGroupComms {
  // Takes ownership of `coll` and `side`; `world_ranks[r]` is group rank r's world rank.
  MpiGroupComms(MPI_Comm coll, MPI_Comm side, const std::vector<int>& world_ranks,
                int world_size);
  ~MpiGroupComms();  // frees the communicators, unless stuck or MPI is finalized
  MpiGroupComms(const MpiGroupComms&) = delete;
  MpiGroupComms& operator=(const MpiGroupComms&) = delete;

  MPI_Comm coll = MPI_COMM_NULL;
  MPI_Comm side = MPI_COMM_NULL;
  std::vector<int> world_ranks;
  std::vector<int> rank_of_world;  // -1 outside the group
  // A collective on `coll` timed out: MPI may still use the communicators, never free them.
  std::atomic<bool> stuck{false};
};

class MpiWorld {
 public:
  // Takes ownership of `base` (a duplicate of the communicator ferry was given).
  explicit MpiWorld(MPI_Comm base);
  ~MpiWorld();
  MpiWorld(const MpiWorld&) = delete;
  MpiWorld& operator=(const MpiWorld&) = delete;

  MPI_Comm base() const { return base_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  int tag_ub() const { return tag_ub_; }
  // Ranks of `base` that share this rank's host (MPI_COMM_TYPE_SHARED), counted at start.
  int ranks_on_host() const { return ranks_on_host_; }

  // World ranks of the members of `comm`, in its rank order.
  std::vector<int> world_ranks_of(MPI_Comm comm) const;

  void add(uint32_t group, std::shared_ptr<MpiGroupComms> comms);
  void remove(uint32_t group);
  // Throws TransportError when the group has no communicators here.
  std::shared_ptr<MpiGroupComms> find(uint32_t group, const char* why) const;

 private:
  MPI_Comm base_;
  MPI_Group base_group_ = MPI_GROUP_NULL;
  int rank_ = 0;
  int size_ = 0;
  int tag_ub_ = 32767;
  int ranks_on_host_ = 0;
  mutable std::mutex mu_;
  std::map<uint32_t, std::shared_ptr<MpiGroupComms>> groups_;
};

// A duplicate of `comm` with MPI_ERRORS_RETURN (ferry never changes the user's communicator).
MPI_Comm dup_with_errors_returned(MPI_Comm comm, const std::string& where);

}  // namespace ferry::detail
