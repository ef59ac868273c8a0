// Precompiled header of the Catch2 test targets with many sources: the library's (the standard
// library and Eigen/Core) and Catch2's single header, about 1 s of parsing in every test source.
// Building it costs about 9 s of CPU per target, so only targets of 9 or more sources use it
// (tests/{runtime,collectives,autograd,torchrec}); a target with a handful of sources would spend
// more on its PCH than it saves. Never for a target with a source that configures Catch2 by a
// macro before its include (tests/catch/catch_impl.cpp, tests/collectives/main.cpp).
#include "ferry_pch.h"

#include <catch2/catch.hpp>
