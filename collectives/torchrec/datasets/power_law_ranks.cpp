#include <ferry/collectives/torchrec/datasets/power_law_ranks.h>

#include <ferry/runtime/error.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace ferry::torchrec::detail {

PowerLawRanks::PowerLawRanks(int64_t n, double s, int64_t tabulated)
    : n_(n), s_(s), log_form_(std::abs(s - 1) < 1e-12) {
  FERRY_CHECK(n >= 1 && n < (int64_t{1} << 31) && s > 0 && tabulated >= 0, InvalidArgument,
              "PowerLawRanks: need 1 <= n < 2^31, s > 0 and tabulated >= 0 (got n ", n, ", s ",
              s, ", tabulated ", tabulated, ")");
  const double base = static_cast<double>(n) + 1;
  // The same expression as the closed form's, so that the tail and the edges agree with it.
  span_ = log_form_ ? std::log(base) : std::pow(base, 1 - s) - 1;
  const int64_t t = std::min(n, tabulated);
  edges_.resize(static_cast<size_t>(t));
  for (int64_t k = 0; k < t; ++k) {
    // Rank k ends where x reaches k + 2; the last rank never ends (the closed form clamps).
    double edge = std::numeric_limits<double>::infinity();
    if (k + 1 < n) {
      const double j = static_cast<double>(k + 2);
      edge = log_form_ ? std::log(j) / span_ : (std::pow(j, 1 - s) - 1) / span_;
    }
    // Rounding must not make the edges decrease: the search relies on their order.
    if (k > 0) edge = std::max(edge, edges_[static_cast<size_t>(k - 1)]);
    edges_[static_cast<size_t>(k)] = edge;
  }
  // Up to kCellsPerRank cells per tabulated rank (while the guide stays within kMaxCells, at
  // least one per rank): most cells then hold no edge, and a uniform falling in such a cell has
  // its rank from the guide alone (one load, no search). A cell holding edges is bisected.
  const size_t t_size = std::max<size_t>(1, edges_.size());
  const size_t cells = std::max(t_size, std::min(kCellsPerRank * t_size, kMaxCells));
  guide_.resize(cells + 1);
  size_t k = 0;
  for (size_t j = 0; j <= cells; ++j) {
    const double left = static_cast<double>(j) / static_cast<double>(cells);
    while (k < edges_.size() && left >= edges_[k]) ++k;
    guide_[j] = static_cast<int32_t>(k);
  }
  cells_ = static_cast<double>(cells);
}

int64_t PowerLawRanks::rank(double u) const {
  auto cell = static_cast<size_t>(u * cells_);
  if (cell + 1 >= guide_.size()) cell = guide_.size() - 2;  // u * cells may round up to cells
  // guide_[cell] is the rank of the cell's left end and guide_[cell + 1] that of the next
  // cell's: equal, no edge lies inside the cell. Otherwise the rank lies between the two (in
  // the tail one cell may span many ranks), and the edges between them are bisected.
  const auto lo = static_cast<size_t>(guide_[cell]);
  const auto next = static_cast<size_t>(guide_[cell + 1]);
  if (lo == next && lo < edges_.size()) return static_cast<int64_t>(lo);
  const size_t hi = std::min(next + 1, edges_.size());
  const auto first = edges_.begin() + static_cast<std::ptrdiff_t>(std::min(lo, hi));
  const auto r = static_cast<size_t>(
      std::upper_bound(first, edges_.begin() + static_cast<std::ptrdiff_t>(hi), u) -
      edges_.begin());
  return r < edges_.size() ? static_cast<int64_t>(r) : tail_rank(u);
}

int64_t PowerLawRanks::inverse_cdf_rank(double u) const {
  const double x = log_form_ ? std::pow(static_cast<double>(n_) + 1, u)
                             : std::pow(1 + u * span_, 1 / (1 - s_));
  return std::clamp<int64_t>(static_cast<int64_t>(x) - 1, 0, n_ - 1);
}

int64_t PowerLawRanks::tail_rank(double u) const {
  // u is past the last tabulated edge: the rank is at least tabulated() whatever the closed
  // form's rounding says.
  return std::max(inverse_cdf_rank(u), tabulated());
}

double PowerLawRanks::probability(int64_t k) const {
  FERRY_CHECK(k >= 0 && k < n_, InvalidArgument, "PowerLawRanks: rank ", k,
              " is not in [0, ", n_, ")");
  auto cdf = [&](double x) {  // P(X < x) for x in [1, n + 1]
    return log_form_ ? std::log(x) / span_ : (std::pow(x, 1 - s_) - 1) / span_;
  };
  const double lo = static_cast<double>(k) + 1;
  return (k + 1 == n_ ? 1.0 : cdf(lo + 1)) - cdf(lo);
}

}  // namespace ferry::torchrec::detail
