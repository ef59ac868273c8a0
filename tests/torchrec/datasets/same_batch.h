// A Catch2 check that two batches hold the same tensors, bit for bit (the loaders' tests).
#pragma once

#include <ferry/collectives/torchrec/torchrec.h>

#include <catch2/catch.hpp>

namespace ferry::torchrec::testing {

inline void check_same(const Batch& a, const Batch& b) {
  CHECK(equal(a.dense, b.dense));
  CHECK(equal(a.labels, b.labels));
  CHECK(a.sparse.keys() == b.sparse.keys());
  CHECK(a.sparse.stride() == b.sparse.stride());
  CHECK(equal(a.sparse.values(), b.sparse.values()));
  CHECK(equal(a.sparse.lengths(), b.sparse.lengths()));
}

}  // namespace ferry::torchrec::testing
