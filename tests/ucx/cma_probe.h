// Whether this rank may read its peers' memory (process_vm_readv), found the way the UCX
// transport finds it: by reading each peer's published CMA token (ucx_cma.h). Hosts differ
// (Yama ptrace_scope=1 refuses reads between sibling processes, containers may lack
// CAP_SYS_PTRACE), so tests that check which path carried the data ask first.
#pragma once

#include <ferry/collectives/group.h>

namespace ucxtest {

// The number of other ranks of `g` whose memory this rank may not read. Collective over `g`
// (an all_gather of each rank's pid and token); every rank must run on this host.
int cma_unreadable_peers(const ferry::Group& g);

}  // namespace ucxtest
