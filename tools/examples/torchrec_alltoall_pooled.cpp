// torchrec's alltoall_pooled on 2 ranks: each rank holds the pooled embeddings of its own tables
// (2 and 3 columns) for all 4 samples; after the all-to-all each rank has its 2 samples with
// every table's columns side by side. The launch returns at once (Req/Wait): work recorded
// before wait() overlaps the exchange. Run: ./example-torchrec
#include <ferry/ferry.h>

#include "tools/examples/example_check.h"

int main() {
  example::Findings findings;
  ferry::run_ranks(2, [&](ferry::Group& group) {
    using namespace ferry::torchrec;
    const int me = group.rank();
    const std::vector<int64_t> dims = {2, 3};  // columns of rank 0's and rank 1's tables
    // Rank r's value for sample s: 100 (r + 1) + s.
    ferry::Tensor pooled = ferry::empty({4, dims[static_cast<size_t>(me)]}, ferry::DType::Float32);
    for (int64_t s = 0; s < 4; ++s) pooled.narrow(0, s, 1).fill_(100.0 * (me + 1) + s);
    ferry::Variable x(pooled, /*requires_grad=*/true);

    auto req = alltoall_pooled(x, All2AllPooledInfo(/*batch_size_per_rank=*/{2, 2}, dims), group);
    ferry::Variable y = req.wait();  // [2, 5]
    const int64_t sample = 2 * me;   // this rank's first sample
    findings.expect_near(me, "y[0][0] (rank 0's table)", y.value().get_flat(0), 100.0 + sample);
    findings.expect_near(me, "y[0][2] (rank 1's table)", y.value().get_flat(2), 200.0 + sample);
    ferry::backward(ferry::sum(y));
    // The gradient columns go back to their ranks, divided by W (torchrec's gradient division).
    findings.expect_near(me, "x.grad", x.grad().get_flat(0), 1.0 / group.size());
  });
  return findings.report("example-torchrec");
}
