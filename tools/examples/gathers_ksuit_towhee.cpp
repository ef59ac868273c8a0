// The same all-gather forward with the two gradients the families disagree on, on 3 ranks:
// ksuit's all_gather_grad is the adjoint of the sum of the per-rank losses (each rank's rows
// receive the sum of every rank's gradient for them), towhee's AllGather keeps this rank's rows
// of its own gradient (the loss counted once: a replicated computation).
// Run: ./example-gathers
#include <ferry/ferry.h>

#include "tools/examples/example_check.h"

int main() {
  example::Findings findings;
  ferry::run_ranks(3, [&](ferry::Group& world) {
    const int me = world.rank(), w = world.size();
    ferry::Variable a(ferry::full({2, 4}, me + 1.0, ferry::DType::Float32), true);
    ferry::Variable b(ferry::full({2, 4}, me + 1.0, ferry::DType::Float32), true);

    ferry::Variable ga = ferry::ksuit::all_gather_grad(a, world);  // [2W, 4]
    ferry::Variable gb = ferry::towhee::all_gather(b, world);
    for (int k = 0; k < w; ++k) {
      findings.expect_near(me, "ksuit rows of rank " + std::to_string(k),
                           ga.value().get_flat(k * 8), k + 1.0);
      findings.expect_near(me, "towhee rows of rank " + std::to_string(k),
                           gb.value().get_flat(k * 8), k + 1.0);
    }
    ferry::backward(ferry::sum(ga) + ferry::sum(gb));
    findings.expect_near(me, "ksuit a.grad", a.grad().get_flat(0), w);    // every rank's loss
    findings.expect_near(me, "towhee b.grad", b.grad().get_flat(0), 1.0);  // this rank's only
  });
  return findings.report("example-gathers");
}
