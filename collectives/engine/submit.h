// Queueing an op on its group's executor: the engine's general issue path (internal).
#pragma once

#include <ferry/collectives/engine/op_context.h>
#include <ferry/collectives/engine/op_description.h>
#include <ferry/collectives/group.h>
#include <ferry/runtime/work.h>

#include <functional>
#include <vector>

namespace ferry::detail {

// The op's body runs on the group's worker (or on a thread waiting for it); what it returns
// becomes Work::outputs().
using OpBody = std::function<std::vector<Tensor>(OpContext&)>;

// Takes the next sequence number of the group and queues `body`. Throws at once if the group is
// poisoned. Any error from the body fails the Work and poisons the group (the ranks can no
// longer be assumed to be in step).
Work submit(const Group& group, const char* op, OpSummary what, OpBody body);

}  // namespace ferry::detail
