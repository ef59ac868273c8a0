// One rank of a job that uses ferry::Store as a trainer would, started by ferry-run (which sets
// FERRY_RENDEZVOUS, FERRY_RANK, FERRY_WORLD_SIZE, FERRY_SECRET): the store is found from the
// environment alone. With the argument `init`, ferry::init() runs first (UCX through the TCP
// rendezvous on the same port), which shows the store taking the port over once the rendezvous
// is done. Exits 0 only if every check held.
#include <ferry/ferry.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

int failures = 0;

void expect(bool ok, const std::string& what, int rank) {
  if (!ok) {
    std::fprintf(stderr, "store_job rank %d: FAILED: %s\n", rank, what.c_str());
    ++failures;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool with_init = argc > 1 && std::strcmp(argv[1], "init") == 0;
  ferry::Group world;
  if (with_init) world = ferry::init();
  ferry::Store store;  // every setting from the environment
  const ferry::LaunchEnvironment launch = ferry::launch_environment();
  const int rank = store.rank(), size = launch.world_size;
  expect(rank == launch.rank, "the store's rank is the launcher's", rank);
  store.set("addr/" + std::to_string(rank), "host-of-" + std::to_string(rank));
  for (int r = 0; r < size; ++r)
    expect(store.get("addr/" + std::to_string(r)) == "host-of-" + std::to_string(r),
           "get addr/" + std::to_string(r), rank);
  for (int i = 0; i < 50; ++i) store.add("counter", rank + 1);
  store.set("done/" + std::to_string(rank), "");
  std::vector<std::string> done;
  for (int r = 0; r < size; ++r) done.push_back("done/" + std::to_string(r));
  store.wait(done, std::chrono::seconds(60));
  expect(store.get("counter") == std::to_string(50 * size * (size + 1) / 2),
         "the adds of every rank summed exactly", rank);
  // Rank 0's store must outlive the others' use: rank 0 leaves once every rank said it has read
  // what it needed (one blocking wait, no polling).
  store.set("finished/" + std::to_string(rank), "");
  if (rank == 0) {
    std::vector<std::string> finished;
    for (int r = 0; r < size; ++r) finished.push_back("finished/" + std::to_string(r));
    store.wait(finished, std::chrono::seconds(60));
    expect(store.num_keys() == 3 * size + 1, "num_keys counts every rank's keys", rank);
  }
  if (with_init) ferry::finalize();
  std::printf("store_job rank %d of %d: %s\n", rank, size, failures == 0 ? "ok" : "FAILED");
  return failures == 0 ? 0 : 1;
}
