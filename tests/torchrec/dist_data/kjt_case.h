// KJT_CASE: an SPMD body for the torchrec dist tests, written once and run two ways: as a Catch2
// test case on local worlds of the listed sizes (run_ranks, one thread per rank), and as a
// spmd::Case that test_torchrec_spmd runs once per process on ferry::init()'s world (MPI or
// UCX under mpiexec / ferry-run). A body fails by throwing; need() throws spmd::Failed naming
// the rank. Bodies must work for any world size the process launchers use (2 and 3), taking a
// sub-group where a case needs a fixed size (first_ranks).
#pragma once

#include <ferry/collectives/group.h>
#include <ferry/collectives/run_ranks.h>
#include "tests/spmd/spmd.h"

#include <catch2/catch.hpp>

#include <sstream>
#include <string>
#include <vector>

namespace kjttest {

using ferry::Group;

inline void need(bool ok, const Group& g, const std::string& what) {
  if (!ok) throw spmd::Failed("rank " + std::to_string(g.rank()) + "/" + std::to_string(g.size()) + ": " + what);
}

template <class T>
std::string str(const std::vector<T>& v) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << "]";
  return os.str();
}

template <class T>
void need_eq(const std::vector<T>& got, const std::vector<T>& want, const Group& g,
             const std::string& what) {
  if (got != want) need(false, g, what + ": got " + str(got) + ", want " + str(want));
}

// The group of world ranks 0..n-1 (a null Group on the others). Collective on `g`.
inline Group first_ranks(const Group& g, int n) {
  return g.split(g.rank() < n ? 0 : ferry::kUndefinedColor, g.rank());
}

inline bool register_case(const char* name, const char* tags, void (*fn)(Group&)) {
  return spmd::add({name, tags, [fn](Group& g) { fn(g); }});
}

}  // namespace kjttest

#define KJT_CONCAT2(a, b) a##b
#define KJT_CONCAT(a, b) KJT_CONCAT2(a, b)
#define KJT_CASE(name, tags, ...) KJT_CASE_IMPL(KJT_CONCAT(kjt_body_, __LINE__), name, tags, __VA_ARGS__)
#define KJT_CASE_IMPL(fn, name, tags, ...)                                               \
  static void fn(::ferry::Group& g);                                                     \
  [[maybe_unused]] static const bool KJT_CONCAT(fn, _registered) =                       \
      ::kjttest::register_case(name, tags, fn);                                          \
  TEST_CASE(name, tags) {                                                                \
    const int world = GENERATE(from_range(std::vector<int>{__VA_ARGS__}));              \
    INFO("world size " << world);                                                        \
    REQUIRE_NOTHROW(::ferry::run_ranks(world, fn));                                      \
  }                                                                                      \
  static void fn([[maybe_unused]] ::ferry::Group& g)
