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
}  // namespace detail

}  // namespace ferry
