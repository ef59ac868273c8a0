// The reduction operators of the collectives. Here, below the collectives, because a transport
// with native collectives (MPI) maps them to its own operators.
#pragma once

namespace ferry {

enum class ReduceOp { Sum, Avg, Prod, Min, Max };
const char* reduce_op_name(ReduceOp op);  // "sum", "avg", ...

}  // namespace ferry
