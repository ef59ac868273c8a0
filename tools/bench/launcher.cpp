#include "tools/bench/launcher.h"

#include "tools/bench/options.h"

#include <algorithm>

namespace ferry::bench {
namespace {

// Local ranks are threads of one process, so they exchange through plain shared memory: it
// cannot be disturbed by the runtime under test, and costs nothing the timing would notice.
// ferry::barrier orders the accesses (its messages complete with release/acquire in the local
// transport, and the dissemination pattern links every rank to every other).
struct LocalShared {
  explicit LocalShared(int n) : vectors(n), flags(n) {}
  std::vector<std::vector<double>> vectors;  // slot r written only by rank r
  std::vector<char> flags;                   // char, not bool: vector<bool> packs bits, so
                                             // neighbouring ranks would write the same byte
};

class LocalRankSync : public RankSync {
 public:
  LocalRankSync(LocalShared& shared, const Group& group) : shared_(shared), group_(group) {}

  std::vector<double> max_over_ranks(const std::vector<double>& mine) override {
    shared_.vectors[group_.rank()] = mine;
    barrier(group_).wait();
    std::vector<double> result = mine;
    for (const auto& other : shared_.vectors) {
      FERRY_CHECK(other.size() == mine.size(), MismatchError,
                  "ferry-bench: ranks timed different iteration counts (", other.size(), " vs ",
                  mine.size(), ")");
      for (size_t i = 0; i < result.size(); ++i) result[i] = std::max(result[i], other[i]);
    }
    // Nobody may overwrite its slot for the next exchange before everyone has read this one.
    barrier(group_).wait();
    return result;
  }

  bool all_of(bool mine) override {
    shared_.flags[group_.rank()] = mine;
    barrier(group_).wait();
    const bool all = std::all_of(shared_.flags.begin(), shared_.flags.end(),
                                 [](char f) { return f != 0; });
    barrier(group_).wait();
    return all;
  }

 private:
  LocalShared& shared_;
  Group group_;
};

class LocalLauncher : public Launcher {
 public:
  explicit LocalLauncher(int world_size) : world_size_(world_size) {}
  int world_size() const override { return world_size_; }

  void run(const RankFn& fn) override {
    LocalShared shared(world_size_);
    run_ranks(world_size_, [&](Group& world) {
      LocalRankSync sync(shared, world);
      fn(world, sync);
    });
  }

 private:
  int world_size_;
};

}  // namespace

const std::vector<std::string>& known_transports() {
  static const std::vector<std::string> names = {"local", "mpi", "ucx"};
  return names;
}

std::unique_ptr<Launcher> make_launcher(const std::string& transport, int world_size) {
  if (transport == "local") return std::make_unique<LocalLauncher>(world_size);
  if (transport == "mpi" || transport == "ucx") return make_mpi_launcher(transport);
  if (std::find(known_transports().begin(), known_transports().end(), transport) !=
      known_transports().end()) {
    throw UsageError("transport " + transport + " is not built into this ferry");
  }
  std::string valid;
  for (const auto& t : known_transports()) valid += (valid.empty() ? "" : ", ") + t;
  throw UsageError("--transport: unknown transport '" + transport + "'; expected one of " + valid);
}

}  // namespace ferry::bench
