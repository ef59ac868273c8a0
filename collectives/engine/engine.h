// The collective engine (internal): what an op in ops/ uses to run.
//
// An op validates its arguments (validator.h), then is issued as a value (issue.h): issue()
// takes the group's next sequence number under its issue lock and either starts the op at once
// on the issuing thread (its transport's native call, or its algorithm's one-round post; its
// Work is an InFlightWork, in_flight_work.h) or queues it on the group's executor, run there or
// by a thread that waits for it (a QueuedWork, queued_work.h) over the point-to-point context
// (op_context.h) or the transport's native collectives. Every Work is named by an OpDescription
// (op_description.h) and poisons the group when a user's wait on it expires.
#pragma once

#include <ferry/collectives/engine/group_impl.h>
#include <ferry/collectives/engine/in_flight_work.h>
#include <ferry/collectives/engine/issue.h>
#include <ferry/collectives/engine/op_context.h>
#include <ferry/collectives/engine/op_description.h>
#include <ferry/collectives/engine/queued_work.h>
#include <ferry/collectives/engine/validator.h>
