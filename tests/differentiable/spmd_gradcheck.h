// SPMD cases for differentiable collectives: one body `(Group& g)` that every rank runs,
// registered both as a Catch2 test case over local worlds of the listed sizes (ranks as
// threads) and as a spmd::Case for the mpiexec suites (tests/mpi). A body fails by throwing
// spmd::Failed (through `expect`), never through Catch macros, which are not thread-safe.
//
//   DG_CASE("all_gather: ...", "[all_gather]", 1, 2, 3, 4) { ...uses g... }
#pragma once

#include <ferry/collectives/differentiable/distributed_gradcheck.h>
#include <ferry/collectives/group.h>
#include "tests/spmd/spmd.h"

#include <catch2/catch.hpp>

#include <functional>
#include <string>
#include <vector>

namespace dgtest {

using ferry::Group;
using Body = void (*)(Group&);

// Under mpiexec the world has one size; a case that does not list it runs on the first n
// ranks (n the largest listed size below the world's), the others sit it out. So a case
// written for exactly two ranks (a worked numeric case, TCn) still runs under mpiexec -n 3.
bool register_case(const char* name, const char* tags, Body body, std::vector<int> world_sizes);
// Runs `body` on an n-rank local world; rethrows the first rank's failure.
void run_local(int n, Body body);

// Throws spmd::Failed with `what` (and this rank) unless `ok`.
void expect(bool ok, const Group& g, const std::string& what);
// The check passed, covered `elements` input elements, and every rank of `g` got the same
// verdict (the same worst element).
void expect_passed(const ferry::DistributedGradcheckResult& r, int64_t elements, const Group& g);

// Options for distributed_gradcheck with objective `o`.
ferry::DistributedGradcheckOptions objective(ferry::GradcheckObjective o,
                                             bool replicated_inputs = false);

// One-input, one-output op through the distributed gradcheck; expects it to pass having
// checked `elements` input elements over all ranks.
void check(const Group& g, const std::function<ferry::Variable(const ferry::Variable&)>& op,
           const ferry::Tensor& x, int64_t elements,
           const ferry::DistributedGradcheckOptions& options = {});

}  // namespace dgtest

#define DG_CONCAT2(a, b) a##b
#define DG_CONCAT(a, b) DG_CONCAT2(a, b)
#define DG_CASE(name, tags, ...) DG_CASE_IMPL(DG_CONCAT(dg_body_, __LINE__), name, tags, __VA_ARGS__)
#define DG_CASE_IMPL(fn, name, tags, ...)                                        \
  static void fn(::dgtest::Group& g);                                            \
  [[maybe_unused]] static const bool DG_CONCAT(fn, _registered) =                \
      ::dgtest::register_case(name, tags, fn, {__VA_ARGS__});                                   \
  TEST_CASE(name, tags) {                                                        \
    const int world = GENERATE(from_range(std::vector<int>{__VA_ARGS__}));      \
    INFO("world size " << world);                                                \
    ::dgtest::run_local(world, fn);                                              \
  }                                                                              \
  static void fn([[maybe_unused]] ::dgtest::Group& g)
