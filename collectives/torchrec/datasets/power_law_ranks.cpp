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
  // One cell per tabulated rank keeps the expected search to about one step: a cell holds on
  // average one edge, and the heavy head ranks span many cells each.
  const size_t cells = std::max<size_t>(1, edges_.size());
  guide_.resize(cells);
  size_t k = 0;
  for (size_t j = 0; j < cells; ++j) {
    const double left = static_cast<double>(j) / static_cast<double>(cells);
    while (k < edges_.size() && left >= edges_[k]) ++k;
    guide_[j] = static_cast<int32_t>(k);
  }
}

int64_t PowerLawRanks::rank(double u) const {
  auto cell = static_cast<size_t>(u * static_cast<double>(guide_.size()));
  if (cell >= guide_.size()) cell = guide_.size() - 1;  // u * cells may round up to cells
  // The rank lies between this cell's left end's rank and the next cell's: in the head a rank
  // spans many cells, in the tail one cell may span many ranks, so the edges between the two
  // are bisected rather than walked.
  const auto lo = static_cast<size_t>(guide_[cell]);
  const size_t hi = cell + 1 < guide_.size()
                        ? std::min(static_cast<size_t>(guide_[cell + 1]) + 1, edges_.size())
                        : edges_.size();
  const auto first = edges_.begin() + static_cast<std::ptrdiff_t>(std::min(lo, hi));
  const auto k = static_cast<size_t>(
      std::upper_bound(first, edges_.begin() + static_cast<std::ptrdiff_t>(hi), u) -
      edges_.begin());
  return k < edges_.size() ? static_cast<int64_t>(k) : tail_rank(u);
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
