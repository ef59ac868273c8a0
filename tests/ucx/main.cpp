// The UCX test binary: Catch2 in the parent; "--child NAME" runs one rank of a multi-process
// scenario (child_scenarios.h) started by a test through the TCP rendezvous.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "tests/ucx/child_scenarios.h"

#include <cstring>

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--child") == 0) return ucxtest::run_child(argv[2]);
  return Catch::Session().run(argc, argv);
}
