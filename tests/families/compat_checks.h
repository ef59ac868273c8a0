// Helpers shared by the SPMD cases of the compatibility families (ksuit, towhee, poptorch
// cross-replica): the gradcheck call with the objective of an op's convention, the groups each op
// is checked on, and the per-rank values of the hand-computed two- and four-rank cases. A family's
// test file takes them all with `using namespace compat;`.
#pragma once

#include <ferry/collectives/differentiable/distributed_gradcheck.h>
#include <ferry/collectives/group.h>
#include <ferry/runtime/tensor.h>
#include "tests/differentiable/spmd_gradcheck.h"

#include <functional>
#include <string>
#include <vector>

namespace compat {

using ferry::Group;
using ferry::Tensor;
using ferry::Variable;

inline Tensor rank_input(const ferry::Shape& shape, int seed) {
  return ferry::uniform(shape, -1.0, 1.0, 600 + static_cast<uint64_t>(seed),
                        ferry::DType::Float64);
}

using dgtest::check;
using dgtest::expect;
using dgtest::objective;

// The groups every op is checked on: the world, and from 3 ranks on also a sub-group
// (even / odd ranks, split collectively), so that the group rank differs from the world rank.
inline std::vector<Group> world_and_subgroup(const Group& g) {
  std::vector<Group> groups{g};
  if (g.size() >= 3) groups.push_back(g.split(g.rank() % 2, g.rank()));
  return groups;
}

// Per-rank values of a spec case: values[rank].
inline Tensor pick(const Group& g, const std::vector<Tensor>& values) {
  return values.at(static_cast<size_t>(g.rank()));
}

inline void expect_equal(const Tensor& actual, const Tensor& expected, const Group& g,
                         const std::string& what) {
  dgtest::expect(ferry::equal(actual, expected), g,
                 what + " is " + actual.to_string() + ", expected " + expected.to_string());
}

}  // namespace compat
