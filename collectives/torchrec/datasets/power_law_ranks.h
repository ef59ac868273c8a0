// ferry::torchrec::detail::PowerLawRanks: the popularity-rank draw of SyntheticCriteo
// (synthetic_criteo.h) by table look-up, so that a draw costs no pow.
//
// The distribution: x has density ∝ x^-s on [1, n + 1) and the rank is floor(x) - 1, clamped
// to [0, n). Its closed-form inverse CDF is
//   x(u) = (1 + u ((n + 1)^(1-s) - 1))^(1/(1-s))      (s != 1)
//   x(u) = (n + 1)^u                                    (s == 1)
// for a uniform u in [0, 1); inverse_cdf_rank(u) evaluates exactly that (two pows).
//
// rank(u) gives the same rank by search instead: the first `tabulated` ranks (all of them when
// n <= tabulated) keep their upper edge, the uniform at which the next rank begins
// (((k + 2)^(1-s) - 1) / ((n + 1)^(1-s) - 1) for rank k), and a guide table of as many equal
// cells over [0, 1) holds the rank of each cell's left end, so a draw is one cell look-up and a
// bisection over the edges inside the cell. With up to 4 cells per rank (guide of at most 2^15
// cells, at least one per rank) most cells hold no edge: a draw that falls in one is decided by
// the guide alone. A uniform past the last tabulated edge (the tail of a table larger than
// `tabulated`) takes the closed form, clamped to the tail.
//
// rank(u) == inverse_cdf_rank(u) except when u lies within rounding error of an edge (the edge
// and the closed form round differently): u has 53 random bits, so that takes about
// n * 1e-16 of the draws, a rank one off at the boundary between two ranks.
//
// Memory: 8 bytes per tabulated rank (the edge as double) and 4 per guide cell; building
// costs one pow per tabulated rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ferry::torchrec::detail {

class PowerLawRanks {
 public:
  // n >= 1 ranks, exponent s > 0, at most `tabulated` >= 0 ranks tabulated.
  PowerLawRanks(int64_t n, double s, int64_t tabulated);

  // u in [0, 1). Out of line: the class is internal (not exported from libferry.so), and an
  // installed header's inline code may only call exported functions.
  int64_t rank(double u) const;
  int64_t inverse_cdf_rank(double u) const;  // the closed form, for every rank

  // The guide, for a caller that decides the draws falling in edge-free cells itself (inline,
  // without a call): guide()[j] is the rank of the uniform j / cells(); when guide()[j] ==
  // guide()[j + 1] < tabulated(), every u in cell j has that rank.
  const std::vector<int32_t>& guide() const { return guide_; }
  double cells() const { return cells_; }

  int64_t size() const { return n_; }
  int64_t tabulated() const { return static_cast<int64_t>(edges_.size()); }
  // The probability of rank k under the continuous law: the mass of [k + 1, k + 2).
  double probability(int64_t k) const;

 private:
  int64_t tail_rank(double u) const;

  int64_t n_;
  double s_;
  bool log_form_;       // s == 1 (to 1e-12): the closed form's s == 1 branch
  double span_;         // (n + 1)^(1-s) - 1, or log(n + 1) when log_form_
  static constexpr size_t kCellsPerRank = 4;
  static constexpr size_t kMaxCells = size_t{1} << 15;
  std::vector<double> edges_;   // edges_[k]: the smallest u whose rank exceeds k
  std::vector<int32_t> guide_;  // guide_[j]: rank(j / cells), or tabulated() for the tail;
                                // cells + 1 entries (the last one for u = 1)
  double cells_ = 1;
};

}  // namespace ferry::torchrec::detail
