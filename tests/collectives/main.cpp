// The Catch2 main of the collectives suite: a listener that sets the suite's default deadline.
#define CATCH_CONFIG_EXTERNAL_INTERFACES  // the listener base class
#include <catch2/catch.hpp>
#include "tests/catch/run_catch.h"

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

int main(int argc, char** argv) { return ferry_test::run_catch(argc, argv); }
