#include <ferry/backends/world_handshake.h>

#include <ferry/runtime/error.h>

#include <memory>
#include <string>
#include <vector>

namespace ferry::detail {

void world_handshake(Transport& transport, Handshake which, Clock::time_point deadline) {
  const int me = transport.rank(), n = transport.size();
  if (n == 1) return;
  const Tag tag{0, static_cast<uint32_t>(which), kLifecycleSeq, 0};
  const char* call = which == Handshake::Open ? "ferry::init" : "ferry::finalize";
  // Receives first: a peer's message then never waits for its receive to be posted.
  std::vector<std::unique_ptr<Request>> recvs(static_cast<size_t>(n)), sends(recvs.size());
  for (int p = 0; p < n; ++p)
    if (p != me) recvs[p] = transport.irecv(p, tag, nullptr, 0);
  for (int p = 0; p < n; ++p)
    if (p != me) sends[p] = transport.isend(p, tag, nullptr, 0);
  std::vector<int> absent;
  std::exception_ptr failed;
  int failed_rank = -1;
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    if (!recvs[p]->wait_until(deadline)) {
      absent.push_back(p);
      continue;
    }
    try {
      recvs[p]->rethrow_if_failed();
    } catch (...) {
      if (!failed) {
        failed = std::current_exception();
        failed_rank = p;
      }
    }
  }
  if (failed) {
    rethrow_with_prefix(failed, str(call, " on rank ", me, " of ", n, ": rank ", failed_rank,
                                    " ended before it reached ", call, ": "));
  }
  if (!absent.empty()) {
    std::string ranks;
    for (int p : absent) ranks += (ranks.empty() ? "" : ", ") + std::to_string(p);
    FERRY_THROW(TimeoutError, call, " on rank ", me, " of ", n, ": rank", absent.size() > 1 ? "s " : " ",
                ranks, " did not reach ", call, " before the deadline (FERRY_TIMEOUT); every rank "
                "must call it (a rank that returns from main calls finalize at exit)");
  }
  // Every peer was heard from: our messages only need to have left (a peer that heard from
  // everyone may end at once, and its end may fail a send that it already took).
  for (int p = 0; p < n; ++p)
    if (p != me) (void)sends[p]->wait_until(deadline);
}

}  // namespace ferry::detail
