// One rank's load fails while the others' succeeds: the ranks must not go on out of step, each
// believing the others loaded what it did. What ferry does, pinned:
//  - a load inside checkpoint::agree (as Reader::open does, and the DLRM tool's resume around
//    its reads and load_state_dict calls) fails on every rank alike, naming the rank, and leaves
//    the group in step: the next collective works;
//  - a load outside agree that fails on one rank is that rank's error; when it ends the rank,
//    the others' next collective raises PeerFailure naming it, at once (not at a deadline);
//  - when that rank catches the error and goes on without the collectives the others issue,
//    the ranks' collective counts differ, and the run ends with a MismatchError saying so (over
//    MPI and UCX ferry::finalize compares the same counts).
#include <ferry/collectives/checkpoint/checkpoint.h>
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/run_ranks.h>
#include <ferry/runtime/error.h>

#include <catch2/catch.hpp>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

using namespace ferry;
namespace ck = ferry::checkpoint;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

constexpr int kWorld = 3;
constexpr int kFailing = 1;  // the rank whose load fails
constexpr int64_t kRows = 6, kCols = 4;

struct TempDir {
  std::string path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "ferry-ckpt-load-XXXXXX").string();
    REQUIRE(::mkdtemp(t.data()) != nullptr);
    path = t;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// A checkpoint of one table "t" [kRows, kCols] saved by rows on kWorld ranks.
std::string save_table(const std::string& root) {
  run_ranks(kWorld, [&](Group& g) {
    const int64_t lo = g.rank() * kRows / kWorld, hi = (g.rank() + 1) * kRows / kWorld;
    Tensor rows = full({hi - lo, kCols}, static_cast<double>(g.rank() + 1), DType::Float32);
    ck::save(root, 1, {{"t", {kRows, kCols}, {lo, 0}, rows}}, {}, g);
  });
  return root + "/ckpt-00000001";
}

ck::Expectation table_expectation() {
  ck::Expectation e;
  e.tensors = {{"t", {kRows, kCols}, DType::Float32}};
  return e;
}

// Rank r's part of the table, as a module holding rows of it would load it. On kFailing the
// module was built with another width, as a program given another configuration would be: its
// load fails there only (read_into is local).
void load_part(const ck::Reader& reader, const Group& g) {
  const int64_t lo = g.rank() * kRows / g.size(), hi = (g.rank() + 1) * kRows / g.size();
  const int64_t cols = g.rank() == kFailing ? kCols + 1 : kCols;
  Tensor mine = empty({hi - lo, cols}, DType::Float32);
  reader.read_into("t", {lo, 0}, mine);
}

// Every rank's sum of (rank + 1): the collective the ranks issue after the load.
double world_sum(const Group& g) {
  Tensor x = full({1}, static_cast<double>(g.rank() + 1), DType::Float64);
  all_reduce(x, g).wait();
  return x.item();
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("checkpoint load failing on one rank inside agree: every rank raises it, in step",
          "[checkpoint][load-failure]") {
  TempDir t;
  const std::string dir = save_table(t.path);
  std::mutex mu;
  std::vector<std::string> errors(kWorld);
  std::vector<double> sums(kWorld, 0.0);
  run_ranks(kWorld, [&](Group& g) {
    const ck::Reader reader = ck::Reader::open(dir, table_expectation(), g);
    std::string error;
    try {
      ck::agree(g, "loading the table", [&] { load_part(reader, g); });
    } catch (const InvalidArgument& e) {
      error = e.what();
    }
    // Every rank knows the load failed, so every rank takes the same next step: here the next
    // collective, which must pair with the same collective on every rank.
    const double sum = world_sum(g);
    std::lock_guard<std::mutex> lock(mu);
    errors[static_cast<size_t>(g.rank())] = error;
    sums[static_cast<size_t>(g.rank())] = sum;
  });
  INFO("rank 0: " << errors[0]);
  REQUIRE_FALSE(errors[0].empty());
  for (const std::string& e : errors) CHECK(e == errors[0]);
  CHECK_THAT(errors[0], Contains("loading the table: rank 1: ") && Contains("reading t from") &&
                            Contains("[2, 5]") && Contains("[6, 4]"));
  for (double s : sums) CHECK(s == 6.0);  // 1 + 2 + 3: every rank's all_reduce was the same one
}

TEST_CASE("checkpoint load failing on one rank outside agree: the others' next collective "
          "raises PeerFailure naming it",
          "[checkpoint][load-failure]") {
  TempDir t;
  const std::string dir = save_table(t.path);
  std::mutex mu;
  std::vector<std::string> peer_errors(kWorld);
  const auto t0 = std::chrono::steady_clock::now();
  std::string first;
  try {
    run_ranks(kWorld, [&](Group& g) {
      const ck::Reader reader = ck::Reader::open(dir, table_expectation(), g);
      load_part(reader, g);  // throws on kFailing only, which ends that rank
      try {
        (void)world_sum(g);
      } catch (const PeerFailure& e) {
        std::lock_guard<std::mutex> lock(mu);
        peer_errors[static_cast<size_t>(g.rank())] = e.what();
        throw;
      }
    });
  } catch (const InvalidArgument& e) {
    first = e.what();
  }
  // run_ranks reports the load's own error, from the rank where it happened.
  CHECK_THAT(first, Contains("rank 1: ") && Contains("reading t from"));
  // The others did not go on: their next collective named the rank that ended, at once.
  for (int r = 0; r < kWorld; ++r) {
    if (r == kFailing) continue;
    INFO("rank " << r << ": " << peer_errors[static_cast<size_t>(r)]);
    CHECK_THAT(peer_errors[static_cast<size_t>(r)], Contains("rank 1"));
  }
  CHECK(seconds_since(t0) < 20.0);  // far below any collective's deadline
}

TEST_CASE("checkpoint load failing on one rank that goes on without the others' collective: "
          "the run ends with a MismatchError",
          "[checkpoint][load-failure]") {
  TempDir t;
  const std::string dir = save_table(t.path);
  std::string error;
  try {
    run_ranks(kWorld, [&](Group& g) {
      const ck::Reader reader = ck::Reader::open(dir, table_expectation(), g);
      try {
        load_part(reader, g);
        (void)world_sum(g);  // after a good load only: kFailing skips it
      } catch (const InvalidArgument&) {
        // Swallowed: the mistake this pins the consequences of.
      }
      (void)world_sum(g);
    });
  } catch (const MismatchError& e) {
    error = e.what();
  }
  INFO(error);
  CHECK_THAT(error, Contains("did not issue the same collectives") && Contains("rank 1 issued"));
}
