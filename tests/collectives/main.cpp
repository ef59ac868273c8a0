// The Catch2 main of the collectives suite.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include <ferry/runtime/config.h>

#include <chrono>
#include <cstdlib>

namespace {

// Unless FERRY_TIMEOUT says otherwise, every wait of the suite gets a 60 s deadline (instead
// of 300 s), so a hang surfaces as a TimeoutError naming the op rather than a stuck test.
// Tests that exercise timeouts set shorter deadlines themselves and restore this one.
class DefaultTimeoutListener : public Catch::TestEventListenerBase {
 public:
  using TestEventListenerBase::TestEventListenerBase;
  void testRunStarting(const Catch::TestRunInfo&) override {
    if (std::getenv("FERRY_TIMEOUT") == nullptr)
      ferry::set_default_timeout(std::chrono::milliseconds(60'000));
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(DefaultTimeoutListener)
