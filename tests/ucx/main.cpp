// The UCX test binary: Catch2 in the parent; "--child NAME" runs one rank of a multi-process
// scenario (child_scenarios.h) started by a test through the TCP rendezvous.
#include "tests/catch/run_catch.h"
#include "tests/ucx/child_scenarios.h"

#include <cstring>

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--child") == 0) return ucxtest::run_child(argv[2]);
  return ferry_test::run_catch(argc, argv);
}
