// Catch2's implementation, once for all test binaries (run_catch.h says why). Test files include
// <catch2/catch.hpp> without CATCH_CONFIG_MAIN / CATCH_CONFIG_RUNNER and link this library.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "run_catch.h"

int ferry_test::run_catch(int argc, char** argv) { return Catch::Session().run(argc, argv); }
