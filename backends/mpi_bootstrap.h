// Starting and ending MPI for ferry::init() (internal). Compiled whether or not ferry is built
// with MPI (backends/no_mpi.cpp stands in without it), so callers need no <mpi.h>.
#pragma once

#include <ferry/backends/transport.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

namespace ferry::detail {

// False when this ferry was built without MPI.
bool mpi_built();

// Initializes MPI with MPI_THREAD_MULTIPLE unless it is initialized already (then checks that
// level), and returns a transport over MPI_COMM_WORLD. Throws TransportError without MPI.
std::shared_ptr<Transport> mpi_world_transport();

// MPI_Finalize, when ferry initialized MPI and it is not finalized yet; returns whether MPI was
// ended. `peers_closed`: every rank passed finalize's handshake and none of them had failed
// (world_handshake.h). Without it (a rank failed, hung or never came, which every rank of the job
// then knows), MPI_Finalize would wait for every rank, a hung one too: under MPICH's mpiexec
// ferry skips it and tells mpiexec that the rank ends on purpose (one line on stderr says so);
// under another launcher, or after a collective timed out on another group (MPI cannot cancel
// it), it still runs. MPI_Finalize runs within a bound (10 s, or FERRY_TIMEOUT when shorter):
// past it the process ends, as finalize_within says, with `exit_status` when ferry finalizes as
// the process exits (the status exit() was given; at least 1 after a failure), else (an explicit
// ferry::finalize(), after which the program's own status is not known) with 0 when every rank
// finished and 1 after a failure.
bool mpi_finalize(bool peers_closed, int exit_status = -1);

// Runs `finalize_mpi` (MPI_Finalize) on this thread within `bound`. First flushes the output:
// the program's stdout and stderr (C and C++ streams), ferry's log and timeline files. Should it
// not return within `bound` (2 s more when this thread waits in mpiexec's barrier), another
// thread prints on stderr that rank `rank`'s MPI_Finalize did not return (`context` saying
// when), stops this thread for good (a signal whose handler never returns), tells mpiexec that
// the rank ends on purpose where it can (mpi_launcher_exit.h, so that mpiexec reports the job by
// its ranks' statuses instead of killing it as crashed) and ends the process with `status`
// (std::_Exit: the program's code after finalize does not run). Only with MPI (no_mpi.cpp has
// no stand-in); public for its test, which injects a slow finalize.
void finalize_within(const std::function<void()>& finalize_mpi, std::chrono::milliseconds bound,
                     int rank, int status, const char* context);

}  // namespace ferry::detail
