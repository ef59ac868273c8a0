#include <ferry/collectives/run_ranks.h>

#include <ferry/backends/local/local_transport.h>
#include <ferry/backends/world_handshake.h>
#include <ferry/collectives/engine/group_impl.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/log.h>

#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace ferry {

namespace {

// The world group's progress once the rank's own ops finished: how many collectives it issued
// and whether one failed (finalize's handshake compares the same over MPI and UCX).
detail::GroupProgress world_progress(Group& world) {
  detail::GroupImpl& g = world.impl();
  g.finish_outstanding();  // a dropped Work's op may still fail, and poison the group
  return g.progress();
}

bool is_peer_failure(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const PeerFailure&) {
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace

void run_ranks(int n, const std::function<void(Group& world)>& fn) {
  std::vector<std::shared_ptr<Transport>> transports = make_local_world(n);
  std::mutex mu;
  std::exception_ptr first;
  int first_rank = -1;
  bool only_peer_failures = true;  // every rank that threw did so because another one ended
  // Each rank's world progress, for the check after the join (nullopt: not known).
  std::vector<std::optional<detail::GroupProgress>> progress(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      detail::set_thread_log_rank(r);  // this thread's log lines carry its rank
      // The group outlives the catch below: the failing rank is declared dead first, so that its
      // own queued ops and the peers waiting on it fail at once instead of at their deadline.
      std::optional<Group> world;
      try {
        world.emplace(Group::world(transports[r]));
        fn(*world);
        progress[static_cast<size_t>(r)] = world_progress(*world);
        // Its own ops finish with its groups; after that it takes part in nothing, so a peer
        // still waiting for it (a rank that returned early) fails at once, naming it, instead
        // of at its deadline.
        world.reset();
        end_local_rank(*transports[r], r, "its function returned");
      } catch (...) {
        std::exception_ptr error = std::current_exception();
        const bool peer_failure = is_peer_failure(error);
        {
          std::lock_guard<std::mutex> lock(mu);
          only_peer_failures = only_peer_failures && peer_failure;
          if (!first) {
            first = error;
            first_rank = r;
          }
        }
        if (world && peer_failure) {
          try {
            progress[static_cast<size_t>(r)] = world_progress(*world);
          } catch (...) {
            // Unknown progress: this rank is left out of the check below.
          }
        }
        fail_local_rank(*transports[r], r, error_message(error));
      }
    });
  }
  for (auto& t : threads) t.join();
  // Every rank issues the same collectives, so a rank whose count differs from another's skipped
  // or added one, and a skipping rank's later calls were combined with the others' earlier ones
  // (its call matched the others' skipped one: no op could tell when the two were alike). The
  // ranks that waited for it fail with a PeerFailure naming it; it returned without an error.
  // An error of another kind came first and is reported as it is.
  if (only_peer_failures) {
    for (int a = 0; a < n; ++a) {
      for (int b = 0; b < n; ++b) {
        const auto& pa = progress[static_cast<size_t>(a)];
        const auto& pb = progress[static_cast<size_t>(b)];
        if (a == b || !pa || !pb) continue;
        const std::string differs = detail::progress_mismatch(a, *pa, b, *pb);
        if (!differs.empty()) FERRY_THROW(MismatchError, "ferry::run_ranks: ", differs);
      }
    }
  }
  if (first) rethrow_with_prefix(first, detail::str("rank ", first_rank, ": "));
}

}  // namespace ferry
