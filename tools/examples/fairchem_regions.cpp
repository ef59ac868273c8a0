// fairchem's model-parallel regions (Megatron's f and g) on 4 ranks split into 2 graph-parallel
// groups of 2: copy_to_model_parallel_region is the identity forward and sums the gradients of
// the group backward; reduce_from_model_parallel_region sums forward and passes the gradient
// through. Run: ./example-fairchem
#include <ferry/ferry.h>

#include "tools/examples/example_check.h"

int main() {
  example::Findings findings;
  ferry::run_ranks(4, [&](ferry::Group& world) {
    auto gp = ferry::fairchem::GraphParallel::setup(world, /*gp_size=*/2);
    // x is replicated within the group (the same values on its two ranks).
    ferry::Variable x(ferry::full({2, 3}, 0.5, ferry::DType::Float64), /*requires_grad=*/true);
    ferry::Variable h = ferry::fairchem::copy_to_model_parallel_region(x, gp);
    // Each rank of the group computes its share: here a scale by (gp rank + 1).
    ferry::Variable part = ferry::mul(h, gp.gp_rank() + 1.0);
    ferry::Variable y = ferry::fairchem::reduce_from_model_parallel_region(part, gp);
    ferry::Variable loss = ferry::sum(y);
    loss.backward();
    // y = (1 + 2) x on both ranks; d loss / d x = 1 + 2, summed by copy_to's backward.
    findings.expect_near(world.rank(), "y", y.value().get_flat(0), 3 * 0.5);
    findings.expect_near(world.rank(), "x.grad", x.grad().get_flat(5), 3.0);
  });
  return findings.report("example-fairchem");
}
