// MPI return codes as ferry exceptions (internal). Every communicator ferry uses has
// MPI_ERRORS_RETURN, so a failing MPI call returns here instead of aborting the job.
#pragma once

#include <mpi.h>

#include <string>

namespace ferry::detail {

// MPI_Error_string of `code`, with its error class.
std::string mpi_error_string(int code);

// Throws TransportError "<call> on <where>: <MPI's message>" unless `code` is MPI_SUCCESS.
void check_mpi(int code, const char* call, const std::string& where);

// True between MPI_Init* and MPI_Finalize (or mpi_leave_unfinalized): destructors must not call
// MPI outside it.
bool mpi_usable();

// After a failure ferry may end the rank without MPI_Finalize (mpi_launcher_exit.h); MPI stays
// initialized but nothing may call it any more, as after MPI_Finalize.
void mpi_leave_unfinalized();

}  // namespace ferry::detail
