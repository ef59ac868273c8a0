// ferry-bench --op codec: throughput of the torchrec quantized comm codecs on one core.
//
// For each codec and size: the median time of encode + decode of a float32 tensor of that many
// bytes through the public codec API (allocations included, as a comm op pays them), GB/s of
// float32 input bytes, and std::memcpy of the same bytes timed in the same run with iterations
// alternating: the memory-bound yardstick (a codec moves 1.5x (16-bit) to ~1.25x (8-bit) the
// bytes of a copy). Each size is checked first: the round trip's relative error (printed) must
// be within the codec's bound, or the run stops with status 1 before timing.
#pragma once

#include "tools/bench/options.h"

#include <cstdio>
#include <string>
#include <vector>

namespace ferry::bench {

// The codec names --codec accepts, in the order `--codec all` runs them.
const std::vector<std::string>& codec_bench_names();

// Runs the sweep of `opts.codecs` over `sizes` (bytes of float32 input); prints the table and
// writes CSV rows to `csv` when it is not null. Returns the process exit status (0 or 1).
int run_codec_bench(const Options& opts, const std::vector<size_t>& sizes, std::FILE* csv);

}  // namespace ferry::bench
