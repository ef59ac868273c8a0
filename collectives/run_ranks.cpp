#include <ferry/collectives/run_ranks.h>

#include <ferry/backends/local/local_transport.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/log.h>

#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace ferry {

void run_ranks(int n, const std::function<void(Group& world)>& fn) {
  std::vector<std::shared_ptr<Transport>> transports = make_local_world(n);
  std::mutex mu;
  std::exception_ptr first;
  int first_rank = -1;
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
        // Its own ops finish with its groups; after that it takes part in nothing, so a peer
        // still waiting for it (a rank that returned early) fails at once, naming it, instead
        // of at its deadline.
        world.reset();
        end_local_rank(*transports[r], r, "its function returned");
      } catch (...) {
        std::exception_ptr error = std::current_exception();
        {
          std::lock_guard<std::mutex> lock(mu);
          if (!first) {
            first = error;
            first_rank = r;
          }
        }
        fail_local_rank(*transports[r], r, error_message(error));
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) rethrow_with_prefix(first, detail::str("rank ", first_rank, ": "));
}

}  // namespace ferry
