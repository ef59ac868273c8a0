// torchrec.distributed.collective_utils: run a function on one rank of a group and give every
// member its result.
//
//   is_leader(group, leader_rank = 0)
//   invoke_on_rank_and_broadcast_result(group, rank, func, args...)
//   run_on_leader(group, rank)(func)   -> a callable doing the above with its arguments
//
// Deliberate difference: `rank` is a GROUP rank, and it is also the broadcast's source (ferry's
// broadcast takes group ranks). torchrec hands it to broadcast_object_list as `src`, which
// PyTorch reads as a global rank, so on a sub-group whose ranks differ from the global ones the
// wrong process (or none of the group's) is taken as the source. Here the member whose group rank
// is `rank` runs func and the others receive its result: on the group of world ranks {1, 3},
// rank 1 means world rank 3.
//
// Failures: if func (or serializing its result) throws on the source, the source first tells the
// others, then rethrows its own exception; every other member throws an exception of the same
// ferry::Error type (ferry::Error for anything else) whose message names the source and quotes
// the original message. No member is left waiting. (torchrec's other ranks wait in the
// broadcast until the process group's timeout.)
#pragma once

#include <ferry/collectives/group.h>
#include <ferry/collectives/torchrec/utils/serialization.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

namespace ferry::torchrec {

// True when this process is `group`'s member with group rank leader_rank. A null group stands
// for a program of one process (the original's pg=None): then leader_rank == 0.
bool is_leader(const Group& group, int leader_rank = 0);

namespace internal {

// The broadcast behind invoke_on_rank_and_broadcast_result, for group sizes > 1. Validates
// `rank` (InvalidArgument, before any data moves, on every member alike). On the source runs
// `produce` and sends its bytes, or its failure (then rethrows it there); elsewhere returns the
// bytes received or throws the source's failure. Two broadcasts: a header (status, byte count),
// then the bytes when there are any.
std::vector<uint8_t> run_on_source_and_broadcast(const Group& group, int rank,
                                                 const std::function<std::vector<uint8_t>()>& produce);
// The checks of the size-1 path (the same messages as above).
void check_invoke_args(const Group& group, int rank);

}  // namespace internal

// Calls func(args...) on the member whose group rank is `rank` and returns its result on every
// member of `group`. Collective over `group`: every member must call it, in the same order
// relative to other collectives on the group, with the same `rank` and result type. The result
// type must be Serializable (serialization.h) or void (then every member returns once the source
// finished, with its error if it failed). The source returns func's own result; the others a
// deserialized copy. A group of one member calls func with no communication. Throws
// InvalidArgument for a null group or `rank` outside [0, group.size()).
template <class F, class... Args>
  requires std::invocable<F&, Args&...>
auto invoke_on_rank_and_broadcast_result(const Group& group, int rank, F&& func,
                                         Args&&... args)
    -> std::decay_t<std::invoke_result_t<F&, Args&...>> {
  using R = std::decay_t<std::invoke_result_t<F&, Args&...>>;
  static_assert(std::is_void_v<R> || Serializable<R>,
                "invoke_on_rank_and_broadcast_result: the result type must be Serializable "
                "(trivially copyable, std::string, std::vector of those, or a type with "
                "serialize/deserialize; see serialization.h) or void");
  internal::check_invoke_args(group, rank);
  if (group.size() == 1) return static_cast<R>(std::invoke(func, args...));
  if constexpr (std::is_void_v<R>) {
    internal::run_on_source_and_broadcast(group, rank, [&]() -> std::vector<uint8_t> {
      std::invoke(func, args...);
      return {};
    });
  } else {
    std::optional<R> mine;
    std::vector<uint8_t> bytes =
        internal::run_on_source_and_broadcast(group, rank, [&]() -> std::vector<uint8_t> {
          mine.emplace(std::invoke(func, args...));
          return serialize(*mine);
        });
    if (mine) return std::move(*mine);
    return deserialize<R>(bytes);
  }
}

// The decorator form: run_on_leader(group, rank)(func) is a callable that, called with
// arguments, returns invoke_on_rank_and_broadcast_result(group, rank, func, arguments...). It
// keeps a copy of `group` (a handle) and of func.
class RunOnLeader {
 public:
  RunOnLeader(Group group, int rank) : group_(std::move(group)), rank_(rank) {}

  template <class F>
  auto operator()(F func) const {
    return [group = group_, rank = rank_, func = std::move(func)](auto&&... args) {
      return invoke_on_rank_and_broadcast_result(group, rank, func,
                                                 std::forward<decltype(args)>(args)...);
    };
  }

 private:
  Group group_;
  int rank_;
};

inline RunOnLeader run_on_leader(Group group, int rank) {
  return RunOnLeader(std::move(group), rank);
}

}  // namespace ferry::torchrec
