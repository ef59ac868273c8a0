// Embedding rows as Eigen arrays of a length fixed at compile time (internal to the lookups and
// the fused optimizers). A loop over a table's rows dispatches the row length once
// (with_row_length): for the usual lengths (16, 32, 64, 128 values) Eigen then runs whole SIMD
// registers with no prologue or tail, which for a 16-float row is most of the work of a
// runtime-length loop. Each element is computed as the plain loop computes it, so results do not
// depend on the dispatch.
#pragma once

#include <Eigen/Core>

#include <cstdint>

namespace ferry::torchrec::detail {

// Calls f.template operator()<kCols>() with kCols = C for the usual lengths, 0 otherwise.
template <class F>
void with_row_length(int64_t C, F&& f) {
  switch (C) {
    case 16: f.template operator()<16>(); return;
    case 32: f.template operator()<32>(); return;
    case 64: f.template operator()<64>(); return;
    case 128: f.template operator()<128>(); return;
    default: f.template operator()<0>(); return;
  }
}

// A row of C values as an Eigen array, of fixed length kCols > 0 or runtime length C.
template <class T, int kCols>
using RowArray = Eigen::Array<T, kCols == 0 ? Eigen::Dynamic : kCols, 1>;
template <class T, int kCols>
Eigen::Map<RowArray<T, kCols>> row(T* p, int64_t C) {
  return {p, C};
}
template <class T, int kCols>
Eigen::Map<const RowArray<T, kCols>> row(const T* p, int64_t C) {
  return {p, C};
}

}  // namespace ferry::torchrec::detail
