// Per-rank block lists for MPI's v-collectives (internal). MPI takes int counts and int
// displacements from one base buffer; ferry's list forms (gather, scatter, all_to_all over lists
// of tensors) have one block per rank at any address. Such a list is either expressed relative
// to its lowest block, or, when those distances do not fit an int, sent as one absolute-address
// datatype per block through MPI_Ialltoallw over MPI_BOTTOM.
#pragma once

#include <ferry/backends/mpi/mpi_request.h>

#include <mpi.h>

#include <cstddef>
#include <vector>

namespace ferry::detail {

// n as an MPI int count; InvalidArgument naming `op` beyond 2^31 - 1 `unit`s.
int fit_mpi_int(size_t n, const char* op, const char* unit);

// counts[k] = bytes[k] and displs[k] = the byte distance of bufs[k] from the lowest non-empty
// buffer (returned in `base`); false when a distance does not fit an int (counts that do not
// fit throw, as fit_mpi_int).
bool displacements_from_lowest(const std::vector<void*>& bufs, const std::vector<size_t>& bytes,
                               std::vector<int>& counts, std::vector<int>& displs, char*& base,
                               const char* op);

// Starts MPI_Ialltoallw over MPI_BOTTOM on `comm` of `size` ranks, block k of `send` going to
// rank k and the block from rank k landing at recv[k], each as an absolute-address datatype. The
// counts and datatypes live in `pending` (and are freed with it) until the request finishes.
void start_lists_by_address(MpiPending& pending, MPI_Comm comm, int size,
                            const std::vector<const void*>& send,
                            const std::vector<size_t>& send_bytes, const std::vector<void*>& recv,
                            const std::vector<size_t>& recv_bytes, const char* op);

}  // namespace ferry::detail
