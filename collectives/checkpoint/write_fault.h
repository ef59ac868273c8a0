// A write failure on demand, for the tests of crash safety: after `bytes` more bytes have been
// written to checkpoint files (by any rank of this process), the next write fails as a full disk
// would (ENOSPC). -1 turns it off. Not thread-safe against a save in progress.
#pragma once

#include <cstdint>

namespace ferry::checkpoint::detail {

void set_write_fault(int64_t bytes);

}  // namespace ferry::checkpoint::detail
