// What the shared-memory path's test files share: the skip reason off one host, byte-for-byte
// comparison, the group's run counter, and a mismatched call's expected outcome.
#pragma once

#include "checks.h"

#include <ferry/collectives/engine/group_impl.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace ftest {

// Why a case is skipped ("" runs it): shm needs every rank of the group on one host.
inline std::string not_one_host(const Group& g) {
  return g.impl().one_host() ? "" : "the ranks do not share a host (shm needs one)";
}

inline bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// How many ops of `c` ran by `a` on `g` so far.
inline uint64_t runs(const Group& g, ferry::Collective c, ferry::Algorithm a) {
  return g.impl().runs(c, a);
}

// The dtypes the shared-memory tests run every op on.
inline const std::vector<DType>& shm_dtypes() {
  static const std::vector<DType> all = {DType::Float32, DType::Float64, DType::Int32,
                                         DType::Int64,   DType::Float16, DType::BFloat16};
  return all;
}

// A result of `c` forced to shm against the same op by `other_name`: the same bytes, and shm
// recorded once more than `shm_runs_before` (case `w`).
inline void expect_as_other(Ctx& ctx, const Group& g, const std::string& w, ferry::Collective c,
                            uint64_t shm_runs_before, const Tensor& by_shm,
                            const Tensor& by_other, const char* other_name) {
  ctx.expect(same_bytes(by_shm, by_other),
             [&] { return w + ": shm and " + other_name + " differ"; });
  ctx.expect(runs(g, c, ferry::Algorithm::SharedMemory) == shm_runs_before + 1,
             [&] { return w + ": shm did not run"; });
}

// `call` on a fresh group, given calls that differ across ranks: MismatchError on every rank,
// and `untouched` (what the call would write on this rank; undefined: nothing) still all -7.
inline void expect_mismatch(Group& world, Ctx& ctx, const std::string& what,
                            const std::function<void(Group&)>& call, const Tensor& untouched) {
  Group g = world.split(0, world.rank());
  std::string kind = "none", message;
  try {
    call(g);
  } catch (const ferry::MismatchError& e) {
    kind = "MismatchError";
    message = e.what();
  } catch (const std::exception& e) {
    kind = error_kind(e);
    message = e.what();
  }
  ctx.expect(kind == "MismatchError", [&] {
    return where(g, what) + ": MismatchError expected, given " + kind + ": " + message;
  });
  bool clean = true;
  for (int64_t i = 0; untouched.defined() && i < untouched.numel(); ++i)
    clean = clean && untouched.get_flat(i) == -7;
  ctx.expect(clean, [&] { return where(g, what) + ": data landed before the mismatch"; });
}

}  // namespace ftest
