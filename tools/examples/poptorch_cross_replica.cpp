// Graphcore's cross-replica ops (poptorch_experimental_addons.collectives) on 2 replicas:
// all_reduce_cross_replica_sum and all_gather_cross_replica, forward and gradient.
// Run: ./example-poptorch
#include <ferry/ferry.h>

#include "tools/examples/example_check.h"

int main() {
  example::Findings findings;
  ferry::run_ranks(2, [&](ferry::Group& replicas) {
    const int me = replicas.rank(), r = replicas.size();
    ferry::Variable x(ferry::full({4}, me + 1.0, ferry::DType::Float64), true);
    ferry::Variable s = ferry::poptorch::all_reduce_cross_replica_sum(x, replicas);
    findings.expect_near(me, "sum", s.value().get_flat(0), 1.0 + 2.0);
    ferry::Variable g = ferry::poptorch::all_gather_cross_replica(x, replicas);  // [R, 4]
    findings.expect_near(me, "gathered row of replica 1", g.value().get_flat(4), 2.0);
    ferry::backward(ferry::sum(s) + ferry::sum(g));
    // sum: the gradient passes through (insert_in_grad_graph = false); gather: a
    // reduce_scatter of the R replicas' gradients gives each replica R for its own row.
    findings.expect_near(me, "x.grad", x.grad().get_flat(0), 1.0 + r);
  });
  return findings.report("example-poptorch");
}
