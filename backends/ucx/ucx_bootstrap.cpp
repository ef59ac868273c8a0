// The two ways a UCX world learns its worker addresses: MPI's all-gather under mpiexec, or the
// TCP rendezvous without MPI.
#include <ferry/backends/ucx_bootstrap.h>

#include <ferry/backends/mpi_bootstrap.h>
#include <ferry/backends/native_collectives.h>
#include <ferry/backends/rendezvous/tcp_rendezvous.h>
#include <ferry/backends/ucx/ucx_transport.h>
#include <ferry/runtime/config.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/log.h>

#include <cstring>

namespace ferry::detail {
namespace {

// All-gather of variable-size blobs on the MPI transport's native world collectives: the
// sizes first, then the bytes. The MPI objects are dropped afterwards; MPI itself stays
// initialized until ferry::finalize().
std::vector<std::string> all_gather_through_mpi(Transport& mpi, const std::string& mine) {
  std::shared_ptr<NativeCollectives> coll = mpi.native_world();
  FERRY_CHECK(coll != nullptr, TransportError, "ucx bootstrap: the mpi transport has no "
              "native collectives to exchange addresses with");
  const int n = mpi.size(), me = mpi.rank();
  const auto deadline = Clock::now() + default_timeout();
  // What MPI writes into lives on the heap: after a timeout MPI may still write there, so the
  // request and the buffers are then kept for the rest of the process.
  struct Buffers {
    std::vector<uint64_t> sizes;
    uint64_t my_size = 0;
    std::string all;
  };
  auto buffers = std::make_shared<Buffers>();
  auto run = [&](std::unique_ptr<NativeRequest> r, const char* what) {
    if (!r->wait_until(deadline)) {
      coll->abandon_stuck_request(std::move(r));
      new std::shared_ptr<Buffers>(buffers);  // never freed, on purpose
      FERRY_THROW(TimeoutError, "ucx bootstrap on rank ", me, ": the MPI ", what,
                  " of the worker addresses did not finish before the deadline");
    }
    r->rethrow_if_failed();
  };
  std::vector<uint64_t>& sizes = buffers->sizes;
  sizes.resize(static_cast<size_t>(n));
  buffers->my_size = mine.size();
  const uint64_t& my_size = buffers->my_size;
  std::vector<size_t> eight(static_cast<size_t>(n), 8), at(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) at[r] = 8 * static_cast<size_t>(r);
  run(coll->all_gather(&my_size, sizes.data(), eight, at), "size exchange");
  std::vector<size_t> bytes(static_cast<size_t>(n)), offset(static_cast<size_t>(n));
  size_t total = 0;
  for (int r = 0; r < n; ++r) {
    FERRY_CHECK(sizes[r] <= 64 * 1024 + 256, TransportError, "ucx bootstrap on rank ", me,
                ": rank ", r, " announced a ", sizes[r], "-byte address (at most 65792)");
    bytes[r] = sizes[r];
    offset[r] = total;
    total += sizes[r];
  }
  std::string& all = buffers->all;
  all.assign(total, '\0');
  std::memcpy(all.data() + offset[me], mine.data(), mine.size());
  run(coll->all_gather(all.data() + offset[me], all.data(), bytes, offset), "exchange");
  std::vector<std::string> blobs;
  for (int r = 0; r < n; ++r) blobs.push_back(all.substr(offset[r], bytes[r]));
  return blobs;
}

}  // namespace

bool ucx_built() { return true; }

std::shared_ptr<Transport> ucx_world_transport(bool through_mpi,
                                               const RendezvousOptions* rendezvous) {
  if (through_mpi) {
    std::shared_ptr<Transport> mpi = mpi_world_transport();
    const int rank = mpi->rank(), size = mpi->size();
    FERRY_LOG(Info, "init", "ucx: exchanging worker addresses through MPI (", size, " ranks)");
    return make_ucx_transport(rank, size, [&](const std::string& mine) {
      return all_gather_through_mpi(*mpi, mine);
    });
  }
  const RendezvousOptions options = rendezvous ? *rendezvous : rendezvous_options_from_env();
  FERRY_LOG(Info, "init", "ucx: exchanging worker addresses through the TCP rendezvous at ",
            options.host, ":", options.port, " (rank ", options.rank, " of ", options.size, ")");
  return make_ucx_transport(options.rank, options.size, [&](const std::string& mine) {
    return tcp_rendezvous(options, mine).blobs;
  });
}

}  // namespace ferry::detail
