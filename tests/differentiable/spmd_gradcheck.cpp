#include "spmd_gradcheck.h"

#include <ferry/collectives/collectives.h>
#include <ferry/collectives/run_ranks.h>

#include <algorithm>

namespace dgtest {

bool register_case(const char* name, const char* tags, Body body, std::vector<int> world_sizes) {
  return spmd::add({name, tags, [body, world_sizes](Group& g) {
    int n = 0;
    for (int size : world_sizes) {
      if (size <= g.size()) n = std::max(n, size);
    }
    if (n == g.size()) return body(g);
    // Collective on g: every rank splits, those past the first n get a null group.
    Group first = g.split(g.rank() < n ? 0 : ferry::kUndefinedColor, g.rank());
    if (first.valid()) body(first);
  }});
}

void run_local(int n, Body body) {
  // The first failure comes back with "rank r: " in front; REQUIRE_NOTHROW shows it.
  REQUIRE_NOTHROW(ferry::run_ranks(n, [body](Group& g) { body(g); }));
}

void expect(bool ok, const Group& g, const std::string& what) {
  if (!ok) throw spmd::Failed("rank " + std::to_string(g.rank()) + ": " + what);
}

void expect_passed(const ferry::DistributedGradcheckResult& r, int64_t elements, const Group& g) {
  expect(r.ok, g, r.message);
  expect(r.elements_checked == elements, g,
         "checked " + std::to_string(r.elements_checked) + " elements, expected " +
             std::to_string(elements));
  // The same verdict on every rank: compare (worst rank, worst element) with the group's max.
  ferry::Tensor mine = ferry::from_vector<int64_t>({r.worst_rank, r.worst_element});
  ferry::Tensor most = mine.clone();
  ferry::all_reduce(most, g, ferry::ReduceOp::Max).wait();
  expect(ferry::equal(mine, most), g, "ranks disagree about the worst element: " + r.message);
}

ferry::DistributedGradcheckOptions objective(ferry::GradcheckObjective o,
                                             bool replicated_inputs) {
  ferry::DistributedGradcheckOptions options;
  options.objective = o;
  options.replicated_inputs = replicated_inputs;
  return options;
}

void check(const Group& g, const std::function<ferry::Variable(const ferry::Variable&)>& op,
           const ferry::Tensor& x, int64_t elements,
           const ferry::DistributedGradcheckOptions& options) {
  auto fn = [&](const std::vector<ferry::Variable>& in) {
    return std::vector<ferry::Variable>{op(in[0])};
  };
  expect_passed(ferry::distributed_gradcheck(fn, {x}, g, options), elements, g);
}

}  // namespace dgtest
