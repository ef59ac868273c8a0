// The DLRM step's compute limit on this machine: what one rank's step would take if it did
// nothing but its arithmetic and its embedding traffic, each at the speed this machine shows
// for exactly that work, measured before and after the timed steps (faster_of: the faster of the
// two, part by part, since a moment when the host ran slower is not the machine's limit; one
// measurement moved the printed multiple by up to 1.5x from run to run).
//
//   GEMMs        every matrix product of the MLPs in forward and backward (per layer in -> out
//                at batch B: forward B x in x out; backward dW out x B x in and, except for the
//                first layer, whose input needs no gradient, dx B x out x in), each timed alone
//                with the step's own kernels (ferry::kernels::linear / linear_backward, so bias
//                and ReLU passes are included) on warm operands of the step's shapes;
//   interaction  its FLOPs (forward 2 B P D, backward 4 B P D for P pairs of dim D) at the best
//                GEMM rate measured above;
//   embeddings   the bytes of the rows this rank's lookup reads in forward and its fused update
//                reads and writes in backward (3 x ids x D x 4 B) at the copy rate measured
//                over a buffer the size of this rank's tables.
// The step cannot be faster than their sum on one core; communication, the tape and data are
// what the step adds to it.
#pragma once

#include <cstdint>
#include <vector>

namespace ferry::dlrm_tool {

struct StepShape {
  int64_t batch = 0;                  // per rank
  int64_t dense_in = 13;
  std::vector<int64_t> bottom{};      // layer sizes, last = D
  std::vector<int64_t> top{};         // layer sizes, last = 1
  int64_t num_sparse = 26;            // F
  int64_t dim = 16;                   // D
  double ids_per_rank = 0;            // ids this rank looks up per step
  double table_bytes_per_rank = 0;    // this rank's table storage
};

struct ComputeLimit {
  double gemm_flops = 0, interaction_flops = 0, embedding_bytes = 0;  // per rank and step
  double gemm_ms = 0, interaction_ms = 0, embedding_ms = 0;
  double gemm_gflops = 0;    // the step's GEMM FLOPs / gemm_ms
  double best_gflops = 0;    // the fastest single GEMM shape
  double copy_gbps = 0;
  double total_ms() const { return gemm_ms + interaction_ms + embedding_ms; }
};

// Times the step's work on this thread (about 0.2-0.5 s).
ComputeLimit measure_compute_limit(const StepShape& shape);
// Each part from the measurement that found it faster (the rates with it).
ComputeLimit faster_of(const ComputeLimit& a, const ComputeLimit& b);

}  // namespace ferry::dlrm_tool
