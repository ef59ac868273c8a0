// ferry-bench --op alltoall_pooled,reduce_scatter_v_pooled,...: torchrec's embedding comm ops
// (collectives/torchrec/comm/comm_ops.h), forward and forward + backward, each next to the raw
// collectives that move the same bytes (the forward's, then the gradient's) in the same run,
// with alternating iterations, and next to a memcpy of the input (the memory-bound floor of a
// transfer between ranks of one host: one copy). --codec fp16|bf16|fp8|int8 makes both
// directions quantized; the raw side then moves the encoded bytes.
#pragma once

#include <ferry/ferry.h>
#include "tools/bench/launcher.h"
#include "tools/bench/options.h"

#include <string>
#include <vector>

namespace ferry::bench {

// The op names --op accepts here, in the order `all` runs them.
const std::vector<std::string>& torchrec_op_names();
bool is_torchrec_op(const std::string& name);
// The codec names --codec accepts with a torchrec op ("none" = no codec).
const std::vector<std::string>& torchrec_op_codec_names();

// One rank's part; every rank of `world` calls it. Each op and size is checked (torchrec output
// against the raw collective's, or against the unquantized op within the codec's error) before
// it is timed; returns false on every rank when any rank's check failed. Rank 0 prints when
// `print`.
bool run_torchrec_ops_bench(const Options& opts, const std::vector<size_t>& sizes, Group& world,
                            RankSync& sync, bool print);

}  // namespace ferry::bench
