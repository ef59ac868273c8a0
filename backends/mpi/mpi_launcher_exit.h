// Ending an MPI rank without MPI_Finalize after the job failed (internal).
//
// MPICH's MPI_Finalize waits in its process manager's barrier for every rank of the job: after
// a rank hung (stopped, or stuck outside ferry), the survivors' MPI_Finalize never returns until
// that rank runs again. Leaving MPI unfinalized is no way out either: Hydra (MPICH's mpiexec)
// takes a rank that ends without having finalized for a crash and kills every other rank of the
// job at once, the survivors still handling their error included. What MPI_Finalize tells Hydra
// after its barrier is one PMI-1 command on the socket Hydra handed the rank (PMI_FD):
// "cmd=finalize", answered "cmd=finalize_ack". Sent alone, the rank then ends as one that
// finished on purpose, and no barrier waits for the others. Every rank of the job must then skip
// MPI_Finalize alike: one that enters it waits in the barrier for the ranks that did not.
#pragma once

#include <string>

namespace ferry::detail {

// Tells the process manager that this rank ends on purpose, without MPI_Finalize: true when it
// acknowledged. False, with `why`, where ferry cannot (no PMI_FD: another launcher; an MPI
// library other than MPICH, or one built for PMI-2 or PMIx; no answer within `wait_ms`); then
// nothing was sent, or the launcher did not answer, and the caller falls back to MPI_Finalize.
bool tell_launcher_rank_ends(int wait_ms, std::string* why);

}  // namespace ferry::detail
