// OpContext in isolation (no messages): the limits it checks for every transport.
#include <ferry/collectives/engine/group_impl.h>
#include <ferry/collectives/engine/op_context.h>

#include <catch2/catch.hpp>

#include <chrono>

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
