// The raw collectives on 4 ranks of one process: an all_reduce waited for, an all_gather whose
// completion is handled by a Work::then callback, and a broadcast. Run: ./example-collectives
#include <ferry/ferry.h>

#include "tools/examples/example_check.h"

#include <condition_variable>

int main() {
  example::Findings findings;
  ferry::run_ranks(4, [&](ferry::Group& world) {
    const int me = world.rank(), w = world.size();

    ferry::Tensor x = ferry::full({3}, me + 1.0, ferry::DType::Float32);
    ferry::all_reduce(x, world).wait();  // in place: 1 + 2 + 3 + 4 everywhere
    findings.expect_near(me, "all_reduce", x.get_flat(2), w * (w + 1) / 2.0);

    ferry::Tensor mine = ferry::full({2}, 10.0 * me, ferry::DType::Float64);
    ferry::Tensor all = ferry::zeros({2 * w}, ferry::DType::Float64);
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    // The callback runs on the thread that completes the op; the rank goes on meanwhile.
    ferry::all_gather(mine, all, world).then([&](ferry::Work work) {
      work.wait();  // complete already: rethrows an error, if the op had one
      std::lock_guard<std::mutex> lock(mu);
      done = true;
      cv.notify_all();
    });
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return done; });
    }
    for (int k = 0; k < w; ++k) findings.expect_near(me, "all_gather block", all.get_flat(2 * k), 10.0 * k);

    ferry::Tensor b = ferry::full({4}, me == 0 ? 7.0 : 0.0, ferry::DType::Int32);
    ferry::broadcast(b, /*root=*/0, world).wait();
    findings.expect_near(me, "broadcast", b.get_flat(3), 7.0);
  });
  return findings.report("example-collectives");
}
