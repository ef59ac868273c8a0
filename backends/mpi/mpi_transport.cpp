// Point-to-point over MPI, and the world group's communicators.
#include <ferry/backends/mpi/mpi_transport.h>

#include <ferry/backends/mpi/mpi_call_key.h>
#include <ferry/backends/mpi/mpi_collectives.h>
#include <ferry/backends/mpi/mpi_error.h>
#include <ferry/backends/mpi/mpi_request.h>
#include <ferry/backends/mpi/mpi_world.h>
#include <ferry/backends/mpi_bootstrap.h>
#include <ferry/runtime/progress.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/log.h>

#include <algorithm>
#include <numeric>

namespace ferry {
namespace detail {
namespace {

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  }
  return "an unknown thread level";
}

// How long cancel() waits for MPI to confirm that a request is withdrawn. A receive that
// matched nothing goes at once; one whose data is already moving cannot be withdrawn, and MPI
// writes into its buffer when the data comes, so it is given a while to finish. A send's buffer
// is only read: a short wait lets an MPI that can withdraw sends do so (MPICH over UCX cannot),
// and a send to a stopped rank does not push the caller's TimeoutError past its deadline by a
// second for every such send. A send still posted after it is kept like a receive (let_go):
// MPI reads its buffer whenever the peer takes the message, which must not find it freed or
// reused (the peer would be sent whatever the memory then holds).
constexpr auto kRecvCancelConfirm = std::chrono::seconds(1);
constexpr auto kSendCancelConfirm = std::chrono::milliseconds(20);

class MpiP2PRequest final : public Request {
 public:
  MpiP2PRequest(int peer, bool is_send, std::shared_ptr<MpiGroupComms> comms,
                std::shared_ptr<MpiPending> pending)
      : Request(peer, is_send), comms_(std::move(comms)), pending_(std::move(pending)) {}
  ~MpiP2PRequest() override { cancel(); }

  bool test() override { return pending_->test(); }
  bool wait_until(Clock::time_point deadline) override { return pending_->wait_until(deadline); }
  void rethrow_if_failed() override { pending_->rethrow_if_failed(); }

  void cancel() override { cancel_by(Clock::time_point::max()); }
  void start_cancel() override {
    // Once: a request the caller withdrew is withdrawn again by the destructor, and a second
    // wait for the same unanswered send would cost the caller its confirm time twice.
    if (withdrawn_ || pending_->test()) return;
    withdrawn_ = true;
    MPI_Cancel(pending_->handle());
    withdrawn_at_ = Clock::now();
    confirm_by_ = withdrawn_at_ + (is_send() ? Clock::duration(kSendCancelConfirm)
                                             : Clock::duration(kRecvCancelConfirm));
  }
  void cancel_by(Clock::time_point limit) override {
    start_cancel();
    if (!withdrawn_ || confirmed_ || kept_) return;  // finished before it was withdrawn
    // A send that MPI already delivered completes instead. One that neither happens to (a
    // send to a rank that never receives) stays posted: it is kept, with its communicators,
    // for the rest of the process, and so is its buffer, a send's as a receive's (let_go).
    // Never below a send's confirm time, even when `limit` has passed: MPI confirms a cancel
    // only inside a later call.
    const auto floor = withdrawn_at_ + Clock::duration(kSendCancelConfirm);
    if (pending_->wait_until(std::min(confirm_by_, std::max(limit, floor)))) {
      confirmed_ = true;
      return;
    }
    kept_ = true;
    FERRY_LOG(Info, "transport", pending_->describe(), ": MPI could not withdraw it; it stays ",
              "posted until the process ends, and its buffer (which MPI may still ",
              is_send() ? "read" : "write", ") is kept");
    keep_forever(pending_);
    keep_forever(comms_);
  }
  bool let_go() const override { return !kept_; }

 private:
  std::shared_ptr<MpiGroupComms> comms_;
  std::shared_ptr<MpiPending> pending_;
  bool withdrawn_ = false;
  bool confirmed_ = false;  // the cancel was confirmed (or the request finished meanwhile)
  bool kept_ = false;       // MPI would not let go: kept posted for the rest of the process
  Clock::time_point withdrawn_at_{};
  Clock::time_point confirm_by_{};
};

class MpiTransport final : public Transport {
 public:
  explicit MpiTransport(std::shared_ptr<MpiWorld> world) : world_(std::move(world)) {}

  std::string name() const override { return "mpi"; }
  int rank() const override { return world_->rank(); }
  int size() const override { return world_->size(); }
  int ranks_on_host() const override { return world_->ranks_on_host(); }

  std::unique_ptr<Request> isend(int dst, const Tag& tag, const void* data,
                                 size_t bytes) override {
    return post(dst, tag, const_cast<void*>(data), bytes, true);
  }
  std::unique_ptr<Request> irecv(int src, const Tag& tag, void* data, size_t bytes) override {
    return post(src, tag, data, bytes, false);
  }

  std::shared_ptr<NativeCollectives> native_world() override {
    const std::string where = "the world group";
    MPI_Comm coll = dup_with_errors_returned(world_->base(), where);
    MPI_Comm side = dup_with_errors_returned(world_->base(), where);
    std::vector<int> ranks(static_cast<size_t>(world_->size()));
    std::iota(ranks.begin(), ranks.end(), 0);
    return make_mpi_collectives(world_, /*group_id=*/0,
                                std::make_shared<MpiGroupComms>(coll, side, ranks, size()));
  }

 private:
  std::unique_ptr<Request> post(int peer, const Tag& tag, void* data, size_t bytes,
                                bool is_send) {
    const char* what = is_send ? "isend" : "irecv";
    FERRY_CHECK(peer >= 0 && peer < size(), InvalidArgument, "mpi transport ", what,
                " on world rank ", rank(), ": peer must be in [0, ", size(), "), given ", peer);
    std::shared_ptr<MpiGroupComms> comms = world_->find(tag.group, what);
    const int comm_peer = comms->rank_of_world[static_cast<size_t>(peer)];
    FERRY_CHECK(comm_peer >= 0, InvalidArgument, "mpi transport ", what, " on world rank ",
                rank(), ": world rank ", peer, " is not a member of group ", tag.group);
    // The Tag -> (communicator, MPI tag) mapping of mpi_world.h.
    MPI_Comm comm = comms->side;
    int mpi_tag = 0;
    if (tag.seq == kDiagnosisSeq) {
      mpi_tag = world_->tag_ub();
    } else if (tag.seq == kLifecycleSeq) {
      comm = comms->coll;  // algorithm steps there stay below the group size, far from TAG_UB
      mpi_tag = world_->tag_ub();
    } else if (tag.seq == kP2PSeq) {
      FERRY_CHECK(tag.slot < static_cast<uint32_t>(world_->tag_ub()), InvalidArgument,
                  is_send ? "send" : "recv", " on world rank ", rank(),
                  ": the mpi transport takes tags in [0, ", world_->tag_ub(),
                  ") (MPI_TAG_UB), given ", tag.slot);
      mpi_tag = static_cast<int>(tag.slot);
    } else {
      FERRY_CHECK(tag.slot <= static_cast<uint32_t>(world_->tag_ub()), TransportError,
                  "mpi transport: algorithm step ", tag.slot, " of ", tag_str(tag),
                  " exceeds MPI_TAG_UB ", world_->tag_ub());
      FERRY_CHECK(tag.slot != static_cast<uint32_t>(kKeyCheckTag), TransportError,
                  "mpi transport: algorithm step ", tag.slot, " of ", tag_str(tag),
                  " would take the tag of the collectives' key checks");
      comm = comms->coll;
      mpi_tag = static_cast<int>(tag.slot);
    }
    FERRY_CHECK(bytes <= static_cast<size_t>(INT32_MAX), InvalidArgument, "mpi transport ",
                what, " on world rank ", rank(), ": at most 2^31-1 bytes per message, given ",
                bytes);
    const int count = static_cast<int>(bytes);
    const std::string describe =
        str(is_send ? "send to world rank " : "receive from world rank ", peer, " for ",
            tag_str(tag));
    std::function<std::exception_ptr(const MPI_Status&)> on_status;
    if (!is_send) {
      // MPI accepts a shorter message into a larger receive; ferry's contract wants exactly
      // the posted size, so the receiver reports any difference.
      on_status = [=, me = rank()](const MPI_Status& status) -> std::exception_ptr {
        int error_class = MPI_SUCCESS;
        if (status.MPI_ERROR != MPI_SUCCESS) MPI_Error_class(status.MPI_ERROR, &error_class);
        int got = 0;
        if (error_class == MPI_SUCCESS) MPI_Get_count(&status, MPI_BYTE, &got);
        if (error_class == MPI_ERR_TRUNCATE || (error_class == MPI_SUCCESS && got != count)) {
          return std::make_exception_ptr(MismatchError(
              str("ferry: world rank ", peer, " sent ",
                  error_class == MPI_ERR_TRUNCATE ? str("more than ", count) : str(got),
                  " bytes to world rank ", me, " for ", tag_str(tag), " but rank ", me,
                  " expected ", count, " bytes: the ranks called with different sizes")));
        }
        if (error_class != MPI_SUCCESS)
          return std::make_exception_ptr(TransportError(
              str("ferry: ", describe, " failed in MPI: ", mpi_error_string(status.MPI_ERROR))));
        return nullptr;
      };
    }
    auto pending = std::make_shared<MpiPending>(describe, std::move(on_status));
    const int code = is_send ? MPI_Isend(data, count, MPI_BYTE, comm_peer, mpi_tag, comm,
                                         pending->handle())
                             : MPI_Irecv(data, count, MPI_BYTE, comm_peer, mpi_tag, comm,
                                         pending->handle());
    check_mpi(code, is_send ? "MPI_Isend" : "MPI_Irecv", describe);
    return std::make_unique<MpiP2PRequest>(peer, is_send, std::move(comms), std::move(pending));
  }

  std::shared_ptr<MpiWorld> world_;
};

}  // namespace
}  // namespace detail

void finalize_mpi_bounded(int exit_status) {
  detail::stop_background_progress();
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  detail::finalize_within([] { MPI_Finalize(); }, std::chrono::seconds(10), rank, exit_status,
                          "at the end of the program");
}

std::shared_ptr<Transport> make_mpi_transport(MPI_Comm comm) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  FERRY_CHECK(initialized && !finalized, InvalidArgument, "make_mpi_transport: MPI is ",
              finalized ? "already finalized" : "not initialized",
              "; initialize it with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...) first, or let "
              "ferry::init() do it");
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  FERRY_CHECK(level == MPI_THREAD_MULTIPLE, InvalidArgument,
              "make_mpi_transport: ferry needs MPI_THREAD_MULTIPLE (each group's collectives "
              "run on a worker thread while send/recv are posted from the calling thread), but "
              "MPI was initialized with ", detail::thread_level_name(level),
              "; initialize MPI with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...)");
  FERRY_CHECK(comm != MPI_COMM_NULL, InvalidArgument,
              "make_mpi_transport: expected a communicator, given MPI_COMM_NULL");
  MPI_Comm base = detail::dup_with_errors_returned(comm, "the communicator given to ferry");
  return std::make_shared<detail::MpiTransport>(std::make_shared<detail::MpiWorld>(base));
}

}  // namespace ferry
