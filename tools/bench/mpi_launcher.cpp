// ferry-bench under mpiexec: one rank per process, ferry over MPI or over UCX. ferry-bench owns MPI here (it initializes it
// with MPI_THREAD_MULTIPLE and hands MPI_COMM_WORLD to make_mpi_transport, the user-owned
// communicator path), and keeps a duplicate of its own for the rank exchanges and the --vs-mpi
// baseline, so neither shares a communicator with ferry.
#include <ferry/backends/mpi/mpi_transport.h>
#include "tools/bench/launcher.h"
#include "tools/bench/options.h"

#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <exception>

namespace ferry::bench {
namespace {

void check(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw TransportError(std::string("ferry-bench: ") + call + " failed: " + std::string(text, length));
}

class MpiRankSync : public RankSync {
 public:
  explicit MpiRankSync(MPI_Comm comm) : comm_(comm) {}
  std::vector<double> max_over_ranks(const std::vector<double>& mine) override {
    std::vector<double> result(mine.size());
    check(MPI_Allreduce(mine.data(), result.data(), static_cast<int>(mine.size()), MPI_DOUBLE,
                        MPI_MAX, comm_),
          "MPI_Allreduce");
    return result;
  }
  bool all_of(bool mine) override {
    int in = mine ? 1 : 0, out = 0;
    check(MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_LAND, comm_), "MPI_Allreduce");
    return out != 0;
  }

 private:
  MPI_Comm comm_;
};

MPI_Datatype reducible(DType dtype) {
  switch (dtype) {
    case DType::Float32: return MPI_FLOAT;
    case DType::Float64: return MPI_DOUBLE;
    case DType::Int32: return MPI_INT32_T;
    case DType::Int64: return MPI_INT64_T;
    case DType::UInt8: return MPI_UINT8_T;
    default: return MPI_DATATYPE_NULL;
  }
}

// The blocking MPI call a user would write for the op, with nccl-tests' sizes (ops.h).
class MpiBaseline : public Baseline {
 public:
  MpiBaseline(OpKind op, int64_t count, DType dtype, MPI_Comm comm, bool nonblocking)
      : op_(op), count_(count), elem_(dtype_size(dtype)), type_(reducible(dtype)), comm_(comm),
        nonblocking_(nonblocking) {
    MPI_Comm_size(comm_, &size_);
    const bool reduces =
        op == OpKind::AllReduce || op == OpKind::ReduceScatter || op == OpKind::Reduce;
    if (reduces && type_ == MPI_DATATYPE_NULL)
      throw UsageError(std::string("--vs-mpi: MPI has no ") + dtype_name(dtype) +
                       " reduction to compare " + op_name(op) + " with; use float32, float64, "
                       "int32, int64 or uint8");
    const size_t bytes = static_cast<size_t>(count) * elem_;
    in_.assign(bytes, 1);  // touched now, so no page fault lands in a timed call
    out_.assign(bytes, 0);
    if (type_ == MPI_DATATYPE_NULL) type_ = MPI_BYTE;
  }

  void barrier() override { check(MPI_Barrier(comm_), "MPI_Barrier"); }

  void run() override {
    if (nonblocking_) return run_nonblocking();
    const int n = static_cast<int>(count_);
    const int block = static_cast<int>(count_ / size_);
    // Data movement counts in bytes when the dtype has no MPI type: the same bytes move.
    const int scale = type_ == MPI_BYTE ? static_cast<int>(elem_) : 1;
    switch (op_) {
      case OpKind::AllReduce:
        check(MPI_Allreduce(in_.data(), out_.data(), n, type_, MPI_SUM, comm_), "MPI_Allreduce");
        return;
      case OpKind::AllGather:
        check(MPI_Allgather(in_.data(), block * scale, type_, out_.data(), block * scale, type_,
                            comm_),
              "MPI_Allgather");
        return;
      case OpKind::ReduceScatter:
        check(MPI_Reduce_scatter_block(in_.data(), out_.data(), block, type_, MPI_SUM, comm_),
              "MPI_Reduce_scatter_block");
        return;
      case OpKind::AllToAll:
        check(MPI_Alltoall(in_.data(), block * scale, type_, out_.data(), block * scale, type_,
                           comm_),
              "MPI_Alltoall");
        return;
      case OpKind::Broadcast:
        check(MPI_Bcast(in_.data(), n * scale, type_, kRoot, comm_), "MPI_Bcast");
        return;
      case OpKind::Reduce:
        check(MPI_Reduce(in_.data(), out_.data(), n, type_, MPI_SUM, kRoot, comm_), "MPI_Reduce");
        return;
      case OpKind::Barrier: check(MPI_Barrier(comm_), "MPI_Barrier"); return;
      case OpKind::Memcpy: break;
    }
  }

 private:
  // The same calls, non-blocking, each followed by MPI_Wait.
  void run_nonblocking() {
    const int n = static_cast<int>(count_);
    const int block = static_cast<int>(count_ / size_);
    const int scale = type_ == MPI_BYTE ? static_cast<int>(elem_) : 1;
    MPI_Request r = MPI_REQUEST_NULL;
    switch (op_) {
      case OpKind::AllReduce:
        check(MPI_Iallreduce(in_.data(), out_.data(), n, type_, MPI_SUM, comm_, &r),
              "MPI_Iallreduce");
        break;
      case OpKind::AllGather:
        check(MPI_Iallgather(in_.data(), block * scale, type_, out_.data(), block * scale, type_,
                             comm_, &r),
              "MPI_Iallgather");
        break;
      case OpKind::ReduceScatter:
        check(MPI_Ireduce_scatter_block(in_.data(), out_.data(), block, type_, MPI_SUM, comm_,
                                        &r),
              "MPI_Ireduce_scatter_block");
        break;
      case OpKind::AllToAll:
        check(MPI_Ialltoall(in_.data(), block * scale, type_, out_.data(), block * scale, type_,
                            comm_, &r),
              "MPI_Ialltoall");
        break;
      case OpKind::Broadcast:
        check(MPI_Ibcast(in_.data(), n * scale, type_, kRoot, comm_, &r), "MPI_Ibcast");
        break;
      case OpKind::Reduce:
        check(MPI_Ireduce(in_.data(), out_.data(), n, type_, MPI_SUM, kRoot, comm_, &r),
              "MPI_Ireduce");
        break;
      case OpKind::Barrier: check(MPI_Ibarrier(comm_, &r), "MPI_Ibarrier"); break;
      case OpKind::Memcpy: return;
    }
    check(MPI_Wait(&r, MPI_STATUS_IGNORE), "MPI_Wait");
  }

  OpKind op_;
  int64_t count_;
  size_t elem_;
  MPI_Datatype type_;
  MPI_Comm comm_;
  bool nonblocking_;
  int size_ = 1;
  std::vector<char> in_, out_;
};

// Every rank's blob, through MPI on `comm`: the sizes, then the bytes.
std::vector<std::string> all_gather_blobs(MPI_Comm comm, const std::string& mine) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  int my_bytes = static_cast<int>(mine.size());
  std::vector<int> bytes(static_cast<size_t>(size)), offset(static_cast<size_t>(size));
  check(MPI_Allgather(&my_bytes, 1, MPI_INT, bytes.data(), 1, MPI_INT, comm), "MPI_Allgather");
  int total = 0;
  for (int r = 0; r < size; ++r) {
    offset[r] = total;
    total += bytes[r];
  }
  std::string all(static_cast<size_t>(total), '\0');
  check(MPI_Allgatherv(mine.data(), my_bytes, MPI_BYTE, all.data(), bytes.data(), offset.data(),
                       MPI_BYTE, comm),
        "MPI_Allgatherv");
  std::vector<std::string> blobs;
  for (int r = 0; r < size; ++r) blobs.push_back(all.substr(offset[r], bytes[r]));
  return blobs;
}

class MpiLauncher : public Launcher {
 public:
  explicit MpiLauncher(std::string transport) : transport_(std::move(transport)) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = MPI_THREAD_SINGLE;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    }
    check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiLauncher() override {
    MPI_Comm_free(&comm_);
    // MPICH over UCX's TCP (ranks on several hosts) sometimes never returns from MPI_Finalize
    // (seen under tools/hosts): bounded as ferry::finalize bounds it.
    finalize_mpi_bounded(status_);
  }
  void set_exit_status(int status) override { status_ = status; }

  int world_size() const override { return size_; }
  bool reports() const override { return rank_ == 0; }

  void run(const RankFn& fn) override {
    try {
      Group world = Group::world(
          transport_ == "ucx"
              ? make_ucx_world(rank_, size_,
                               [this](const std::string& mine) {
                                 return all_gather_blobs(comm_, mine);
                               })
              : make_mpi_transport(MPI_COMM_WORLD));
      MpiRankSync sync(comm_);
      fn(world, sync);
    } catch (const std::exception& e) {
      // The other ranks may be waiting for this one: end the job rather than leave them hanging.
      std::fprintf(stderr, "ferry-bench: rank %d: error: %s\n", rank_, e.what());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }

  std::unique_ptr<Baseline> baseline(OpKind op, int64_t count, DType dtype,
                                     bool nonblocking) override {
    return std::make_unique<MpiBaseline>(op, count, dtype, comm_, nonblocking);
  }

 private:
  std::string transport_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int status_ = 1;  // set_exit_status
  int size_ = 1;
};

}  // namespace

std::unique_ptr<Launcher> make_mpi_launcher(const std::string& transport) {
  return std::make_unique<MpiLauncher>(transport);
}

}  // namespace ferry::bench
