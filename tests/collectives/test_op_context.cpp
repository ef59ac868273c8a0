// OpContext in isolation (no messages): the limits it checks for every transport.
#include <ferry/collectives/engine/group_impl.h>
#include <ferry/collectives/engine/op_context.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

using namespace ferry;

TEST_CASE("op context: a third phase fails loudly (the UCX tag has room for two)", "[op_context]") {
  detail::GroupImpl group(nullptr, {0}, 0, 7);
  detail::OpContext ctx(group, "all_to_all", 1, Clock::now() + std::chrono::seconds(1));
  ctx.next_phase();  // phase 1: fine
  try {
    ctx.next_phase();
    FAIL("a third phase was accepted");
  } catch (const InvalidArgument& e) {
    CHECK_THAT(e.what(), Catch::Matchers::Contains("all_to_all") &&
                             Catch::Matchers::Contains("phase 2"));
  }
}

namespace {

// A request whose withdrawal needs `grace` to be confirmed (a transfer under way), like a UCX or
// MPI receive from a live peer; one with `stuck` is never confirmed.
class SlowCancel final : public Request {
 public:
  SlowCancel(std::chrono::milliseconds grace, bool stuck)
      : Request(1, false), grace_(grace), stuck_(stuck) {}
  bool test() override { return done_; }
  bool wait_until(Clock::time_point) override { return done_; }
  void cancel() override { cancel_by(Clock::time_point::max()); }
  void start_cancel() override {
    if (started_ == Clock::time_point{}) started_ = Clock::now();
  }
  void cancel_by(Clock::time_point limit) override {
    start_cancel();
    if (done_) return;
    const auto confirmed = started_ + grace_;
    std::this_thread::sleep_until(std::min(confirmed, limit));
    done_ = true;
    let_go_ = !stuck_ && Clock::now() >= confirmed;
  }
  void rethrow_if_failed() override {}
  bool let_go() const override { return let_go_; }

 private:
  std::chrono::milliseconds grace_;
  bool stuck_;
  Clock::time_point started_{};
  bool done_ = false;
  bool let_go_ = true;
};

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

TEST_CASE("cancel_all: the withdrawals' graces overlap, end at the limit, and report a buffer "
          "not let go", "[op_context]") {
  using std::chrono::milliseconds;
  std::vector<std::unique_ptr<Request>> four;
  for (int i = 0; i < 4; ++i) four.push_back(std::make_unique<SlowCancel>(milliseconds(200), false));
  four.push_back(nullptr);  // skipped
  auto t0 = Clock::now();
  CHECK(cancel_all(four));
  // One grace for all four, not four one after another (800 ms).
  CHECK(seconds_since(t0) < 0.6);

  std::vector<std::unique_ptr<Request>> bounded;
  for (int i = 0; i < 3; ++i) bounded.push_back(std::make_unique<SlowCancel>(milliseconds(2000), false));
  t0 = Clock::now();
  // The limit comes first: the waits end there, and the transfers were not confirmed withdrawn.
  CHECK_FALSE(cancel_all(bounded, Clock::now() + milliseconds(50)));
  CHECK(seconds_since(t0) < 1.0);

  std::vector<std::unique_ptr<Request>> stuck;
  stuck.push_back(std::make_unique<SlowCancel>(milliseconds(1), false));
  stuck.push_back(std::make_unique<SlowCancel>(milliseconds(1), true));
  CHECK_FALSE(cancel_all(stuck));
}
