// FT_SPMD_CASE: one body, two runners. The body `(Group& g, Ctx& ctx)` runs on every rank; it
// becomes a Catch2 test case that runs it on local worlds of the listed sizes (run_checked),
// and a spmd::Case that the mpiexec suite (tests/mpi) runs once per process on the MPI world.
//
//   FT_SPMD_CASE("all_reduce: ...", "[reductions]", 1, 2, 3, 4, 7, 8) { ...uses g, ctx... }
#pragma once

#include "test_helpers.h"
#include "tests/spmd/spmd.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace ftest {

using SpmdBody = void (*)(Group&, Ctx&);
// Why a case cannot run on a world, or "" (spmd::Case::skip_reason).
using SpmdSkipReason = std::string (*)(const Group&);

// Registers `body` as a spmd::Case: a fresh Ctx per run; the case fails (spmd::Failed) when a
// check failed or none was made. On a world where `skip_reason` gives a reason, the runner
// reports the case as skipped instead of running it.
bool register_spmd_case(const char* name, const char* tags, SpmdBody body,
                        SpmdSkipReason skip_reason = nullptr);

}  // namespace ftest

#define FT_SPMD_CONCAT2(a, b) a##b
#define FT_SPMD_CONCAT(a, b) FT_SPMD_CONCAT2(a, b)
#define FT_SPMD_CASE(name, tags, ...) \
  FT_SPMD_CASE_IMPL(FT_SPMD_CONCAT(ft_spmd_body_, __LINE__), name, tags, __VA_ARGS__)
#define FT_SPMD_CASE_IMPL(fn, name, tags, ...)                                               \
  static void fn(::ftest::Group& g, ::ftest::Ctx& ctx);                                     \
  [[maybe_unused]] static const bool FT_SPMD_CONCAT(fn, _registered) =                      \
      ::ftest::register_spmd_case(name, tags, fn);                                          \
  TEST_CASE(name, tags) {                                                                   \
    const int world = GENERATE(from_range(std::vector<int>{__VA_ARGS__}));                  \
    ::ftest::run_checked(world, fn);                                                        \
  }                                                                                         \
  static void fn([[maybe_unused]] ::ftest::Group& g, [[maybe_unused]] ::ftest::Ctx& ctx)
