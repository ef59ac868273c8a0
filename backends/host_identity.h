// Which ranks of a job can share memory (internal).
//
// Two processes can map one POSIX shared-memory segment, wait on one futex and signal each other
// only when they run under one kernel (one boot), in one IPC namespace, see the same /dev/shm
// and see each other's pids. The host name alone says none of that: containers on one machine
// may share a name but not an IPC namespace, and two VMs cloned from one image share names too.
// So the key hashes the host name with the kernel's boot id and the identities of the IPC and
// pid namespaces and of the /dev/shm mount. Ranks whose keys are equal share a host for ferry's
// shared-memory path; a key that cannot be read in full makes the rank unlike every other one,
// so it only loses the path, never its safety.
#pragma once

#include <cstdint>

namespace ferry::detail {

// This process's key: never 0 (0 means "unknown" to the transport, transport.h). A key whose
// parts could not all be read is made unique to the process.
uint64_t this_host_key();

}  // namespace ferry::detail
