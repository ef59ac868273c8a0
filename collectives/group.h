// Group: an ordered set of ranks that run collectives together (an MPI communicator, a
// torch.distributed process group).
//
// A Group is a cheap handle; copies refer to the same group. Each group has its own sequence
// number, advanced by every collective issued on it: collectives must be issued in the same
// order on every member. Operations on one group run one after another on a worker of the group,
// so several may be outstanding; different groups progress independently.
#pragma once

#include <ferry/backends/transport.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ferry {

namespace detail {
class GroupImpl;
}

// Color that leaves the caller out of every group in split (MPI_UNDEFINED).
inline constexpr int kUndefinedColor = -1;

// Which members of a group share a host: learnt from the host keys every rank sent every other
// when the world group was made (backends/host_identity.h: host name, boot, IPC and pid
// namespaces, /dev/shm), so it holds whatever launched the job and needs no launcher variable.
// Hosts are numbered by their first (lowest) group rank; a host's ranks are in group-rank
// order. Hosts may hold different numbers of ranks (3 + 1). A local world (threads of one
// process) is one host.
struct HostLayout {
  // Whether the hosts come from exchanged keys (MPI, UCX); false on the local transport, whose
  // ranks are threads of one process (one host), and on a transport made outside init.
  bool known = false;
  int rank = 0;                        // this rank, in the group
  std::vector<int> host_of;            // by group rank: the index of its host
  std::vector<std::vector<int>> hosts; // by host: its group ranks, ascending

  int num_hosts() const { return static_cast<int>(hosts.size()); }
  int host() const { return host_of[static_cast<size_t>(rank)]; }  // this rank's host
  int local_size() const { return static_cast<int>(hosts[static_cast<size_t>(host())].size()); }
  int local_rank() const;  // this rank's index among its host's ranks
  // Every host holds the same number of ranks.
  bool uniform() const;
  // Every host's ranks are consecutive group ranks (host h holds ranks h*L .. h*L+L-1 when
  // also uniform: the layout torchrec's node groups assume).
  bool contiguous() const;
  // "2 hosts, 2 ranks each: host 0 ranks 0-1, host 1 ranks 2-3" ("3 + 1 ranks" when uneven).
  std::string describe() const;
};

class Group {
 public:
  Group() = default;  // a null group (valid() is false), as returned to ranks split out
  // The group of every rank of `transport`'s world, in world-rank order. One per process and
  // transport; it is not collective.
  static Group world(std::shared_ptr<Transport> transport);

  bool valid() const { return impl_ != nullptr; }
  int rank() const;  // 0..size()-1
  int size() const;
  uint32_t id() const;
  // How many collectives have been issued on this group so far.
  uint64_t sequence_number() const;
  // World ranks of the members, ordered by group rank.
  const std::vector<int>& members() const;
  int world_rank(int group_rank) const;
  Transport& transport() const;

  // Collective over this group (MPI_Comm_split semantics): ranks that pass the same color form
  // a new group, ordered by (key, rank in this group). Ranks passing kUndefinedColor get a null
  // Group. Every member must call it, in the same order relative to other collectives.
  Group split(int color, int key) const;

  // True after a timeout or peer failure: every later call on the group fails at once.
  bool poisoned() const;
  std::string poison_reason() const;

  std::string describe() const;  // "group 2 [world ranks 0,2] rank 1/2"

  // Which members share a host (see HostLayout). Local: no communication, computed from the
  // keys the world group learnt. Throws InvalidArgument on a null group.
  HostLayout host_layout() const;

  detail::GroupImpl& impl() const;
  std::weak_ptr<detail::GroupImpl> weak_impl() const { return impl_; }

 private:
  explicit Group(std::shared_ptr<detail::GroupImpl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<detail::GroupImpl> impl_;
};

namespace detail {
// Where an op runs, in the one form every argument error and op description uses:
// "all_reduce on rank 1 of group 0 (size 2)".
std::string where(const char* op, const Group& group);
// Group::host_layout of the group `g` is (for the engine's algorithms, which hold the
// GroupImpl).
HostLayout host_layout_of(const GroupImpl& g);
}  // namespace detail

}  // namespace ferry
