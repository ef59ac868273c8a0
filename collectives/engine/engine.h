// The collective engine (internal): what an op in ops/ uses to run.
//
// An op validates its arguments (validator.h), then takes one of three issue paths, all of
// which take the group's next sequence number under its issue lock, so every rank runs its ops
// in its own issue order whichever path each took:
//   - submit() (submit.h): queued on the group's executor and run there, or by a thread that
//     waits for it, over the point-to-point context (op_context.h) or the transport's native
//     collectives. Every op can take it.
//   - start_native_now() (native_issue.h): a native (MPI) collective started by the issuing
//     thread when the group has nothing queued, its Work polling the request.
//   - the direct all_reduce started at issue (ops/direct_issue.h), built on this engine and an
//     algorithm, so it lives with the ops.
// Every path's Work is named by an OpDescription (op_description.h) and poisons the group when
// a user's wait on it expires (queued_work.h).
#pragma once

#include <ferry/collectives/engine/group_impl.h>
#include <ferry/collectives/engine/op_context.h>
#include <ferry/collectives/engine/op_description.h>
#include <ferry/collectives/engine/queued_work.h>
#include <ferry/collectives/engine/submit.h>
#include <ferry/collectives/engine/validator.h>
