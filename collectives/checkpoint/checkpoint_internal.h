// What the saving and the loading side of checkpoints share: error text, the names of checkpoint
// directories under a root, and the small collectives both sides decide with. Internal.
#pragma once

#include <ferry/collectives/group.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ferry::checkpoint::detail {

std::string errno_text(int e);

// Strips "ferry: " from a nested message, so that a message says it once.
std::string inner(const std::string& m);

// Throws InvalidArgument "ferry: <what>".
[[noreturn]] void fail(const std::string& what);

// "ckpt-<step>", zero-padded to 8 digits so that names sort by step.
std::string step_name(int64_t step);

// "ckpt-<digits>" -> the step, or -1.
int64_t step_of(const std::string& name);

// Committed checkpoints under root: (step, name), oldest first.
std::vector<std::pair<int64_t, std::string>> committed(const std::string& root);

// Collective: broadcasts a string from root (every rank gets root's).
std::string broadcast_string(const Group& group, int root, const std::string& s);

}  // namespace ferry::checkpoint::detail
