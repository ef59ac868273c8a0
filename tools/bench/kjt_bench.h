// ferry-bench --op kjt_all_to_all: torchrec's two-phase KJT all-to-all (KJTAllToAll) on a
// synthetic KJT, per phase, next to one all_to_all_single of the same bytes in the same run.
#pragma once

#include <ferry/ferry.h>
#include "tools/bench/launcher.h"
#include "tools/bench/options.h"

namespace ferry::bench {

// One rank's part; every rank of `world` calls it. Checks the exchange against a reference
// before timing (returns false on every rank when any rank's check failed). Rank 0 prints when
// `print`.
bool run_kjt_bench(const Options& opts, Group& world, RankSync& sync, bool print);

}  // namespace ferry::bench
