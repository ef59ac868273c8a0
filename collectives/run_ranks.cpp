#include "collectives/run_ranks.h"

#include "backends/local/local_transport.h"
#include "runtime/error.h"

#include <exception>
#include <mutex>
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
      try {
        Group world = Group::world(transports[r]);
        fn(world);
      } catch (const std::exception& e) {
        {
          std::lock_guard<std::mutex> lock(mu);
          if (!first) {
            first = std::current_exception();
            first_rank = r;
          }
        }
        fail_local_rank(*transports[r], r, e.what());
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!first) {
          first = std::current_exception();
          first_rank = r;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) rethrow_with_prefix(first, detail::str("rank ", first_rank, ": "));
}

}  // namespace ferry
