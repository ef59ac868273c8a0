// What a fuzz target does when a property it checks does not hold: print it and abort, so
// libFuzzer keeps the input as a crash (tools/fuzz and smoke.sh show where).
#pragma once

#include <cstdio>
#include <cstdlib>

#define FUZZ_EXPECT(cond)                                                              \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      std::fprintf(stderr, "fuzz property failed: %s [%s:%d]\n", #cond, __FILE__, __LINE__); \
      std::abort();                                                                    \
    }                                                                                  \
  } while (0)
