// The algorithm table's choice for an op, made when it is issued (internal).
//
// Every collective in ops/ asks here once, on the issuing thread, before it takes a sequence
// number: the table (algorithm_table.h) answers an enum from what all ranks agree on, and the
// op's body switches on it. An op records the algorithm it ran (GroupImpl::count_run) where
// that algorithm runs, so a test sees what ran rather than what was asked for.
#pragma once

#include <ferry/collectives/algorithm_table.h>
#include <ferry/collectives/engine/group_impl.h>
#include <ferry/collectives/group.h>
#include <ferry/runtime/error.h>

namespace ferry::detail {

inline Algorithm algorithm_of(const Group& group, Collective c, size_t bytes) {
  return choose_algorithm(c, bytes, group.size(), group.impl().native() != nullptr);
}

// For a switch's default: the table gave `c` an algorithm its op has no code for (the table
// and the op disagree; the parse refuses such a choice before it gets here).
[[noreturn]] inline void no_such_algorithm(Collective c, Algorithm a) {
  FERRY_THROW(InvalidArgument, collective_name(c), " has no algorithm ", algorithm_name(a),
              " (internal error: the algorithm table lists one its op does not run)");
}

}  // namespace ferry::detail
