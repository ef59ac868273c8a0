// The text pieces torchrec's error messages and plan descriptions share: lists, keys, and
// where an op ran (the engine's where). One form each, so that every message reads the same.
#pragma once

#include <ferry/collectives/differentiable/checks.h>
#include <ferry/collectives/group.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace ferry::torchrec::detail {

// A limit that keeps every entry.
inline constexpr size_t kEveryEntry = std::numeric_limits<size_t>::max();

// "[1, 2, 3]"; after `limit` entries ", ... (N entries)" (a message stays short when a batch's
// lengths are in it).
std::string list_str(const std::vector<int64_t>& values, size_t limit = 16);
// "[0,1,2]", every entry: the compact form plans print their ranks in.
std::string compact_list_str(const std::vector<int>& values);
// "[\"a\", \"b\"]"; after `limit` keys ", ... (N keys)".
std::string keys_str(const std::vector<std::string>& keys, size_t limit = 16);
// "<op> on rank R of group G (size W)": the start of an error about one op's call on one rank,
// the engine's own form (group.h), so that torchrec's errors read as the raw collectives' do.
using ferry::detail::where;
// "<op>: called on a null Group (...)": the raw collectives' refusal of a null group (their
// Validator's), for every torchrec op and module that takes a group.
using ferry::detail::check_group;
// The sum of `values` (0 for none).
int64_t sum_of(const std::vector<int64_t>& values);

}  // namespace ferry::torchrec::detail
