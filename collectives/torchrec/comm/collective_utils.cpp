#include <ferry/collectives/torchrec/comm/collective_utils.h>

#include <ferry/collectives/collectives.h>
#include <ferry/collectives/torchrec/utils/format.h>
#include <ferry/collectives/differentiable/checks.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/tensor.h>

#include <exception>
#include <string>

namespace ferry::torchrec {

bool is_leader(const Group& group, int leader_rank) {
  if (!group.valid()) return leader_rank == 0;
  return group.rank() == leader_rank;
}

namespace internal {

namespace {

constexpr const char* kOp = "invoke_on_rank_and_broadcast_result";

// What the header's first word says: the result follows, or the source failed with an error of
// this kind (its message follows).
enum Status : int64_t {
  kOk = 0,
  kFailedError = 1,  // ferry::Error, or anything that is not one of the types below
  kFailedInvalidArgument = 2,
  kFailedMismatch = 3,
  kFailedTimeout = 4,
  kFailedPeer = 5,
  kFailedTransport = 6,
};

Status status_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const InvalidArgument&) {
    return kFailedInvalidArgument;
  } catch (const MismatchError&) {
    return kFailedMismatch;
  } catch (const TimeoutError&) {
    return kFailedTimeout;
  } catch (const PeerFailure&) {
    return kFailedPeer;
  } catch (const TransportError&) {
    return kFailedTransport;
  } catch (...) {
    return kFailedError;
  }
}

[[noreturn]] void throw_as(int64_t status, const std::string& message) {
  switch (status) {
    case kFailedInvalidArgument: throw InvalidArgument(message);
    case kFailedMismatch: throw MismatchError(message);
    case kFailedTimeout: throw TimeoutError(message);
    case kFailedPeer: throw PeerFailure(message);
    case kFailedTransport: throw TransportError(message);
    default: throw Error(message);
  }
}

}  // namespace

void check_invoke_args(const Group& group, int rank) {
  ferry::detail::check_group(group, "torchrec invoke_on_rank_and_broadcast_result");
  FERRY_CHECK(rank >= 0 && rank < group.size(), InvalidArgument, "torchrec ",
              detail::where(kOp, group), ": source rank ", rank,
              " is not a group rank in [0, ", group.size(), ")");
}

std::vector<uint8_t> run_on_source_and_broadcast(
    const Group& group, int rank, const std::function<std::vector<uint8_t>()>& produce) {
  check_invoke_args(group, rank);
  const bool source = group.rank() == rank;
  std::vector<uint8_t> bytes;
  std::exception_ptr failure;
  Tensor header = from_vector<int64_t>({kOk, 0});
  if (source) {
    try {
      bytes = produce();
    } catch (...) {
      failure = std::current_exception();
      const std::string what = error_message(failure);
      bytes.assign(what.begin(), what.end());
      header.data<int64_t>()[0] = status_of(failure);
    }
    header.data<int64_t>()[1] = static_cast<int64_t>(bytes.size());
  }
  broadcast(header, rank, group).wait();
  const int64_t status = header.data<int64_t>()[0];
  const int64_t n = header.data<int64_t>()[1];
  if (!source) bytes.resize(static_cast<size_t>(n));
  if (n > 0) {
    Tensor payload = Tensor::from_blob(bytes.data(), {n}, DType::UInt8);
    broadcast(payload, rank, group).wait();
  }
  if (source) {
    if (failure) std::rethrow_exception(failure);
    return bytes;
  }
  if (status != kOk) {
    throw_as(status,
             ::ferry::detail::str("ferry: torchrec ", detail::where(kOp, group),
                                  ": the function failed on the source, group "
                                  "rank ", rank, " (world rank ", group.world_rank(rank), "): ",
                                  std::string(bytes.begin(), bytes.end())));
  }
  return bytes;
}

}  // namespace internal
}  // namespace ferry::torchrec
