#include <ferry/collectives/torchrec/metrics/auc.h>

#include <ferry/collectives/collectives.h>
#include <ferry/runtime/error.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ferry::torchrec {

namespace {

std::vector<double> as_doubles(const Tensor& t, const char* what) {
  FERRY_CHECK(t.defined(), InvalidArgument, "auc: ", what, " is undefined");
  std::vector<double> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) out[static_cast<size_t>(i)] = t.get_flat(i);
  return out;
}

}  // namespace

double auc_expected(const std::vector<double>& scores, const std::vector<double>& positive_prob) {
  FERRY_CHECK(scores.size() == positive_prob.size(), InvalidArgument, "auc: ", scores.size(),
              " scores but ", positive_prob.size(), " labels");
  for (double s : scores) {
    FERRY_CHECK(!std::isnan(s), InvalidArgument, "auc: a score is NaN");
  }
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  // Walk groups of equal scores upwards. For a positive in a group: every negative below counts
  // 1, every other negative of the group 1/2.
  double right = 0;     // expected correctly ordered pairs (ties 1/2)
  double neg_below = 0; // expected negatives with a lower score
  double pos_total = 0, neg_total = 0, self_pairs = 0;
  for (size_t g = 0; g < order.size();) {
    size_t end = g;
    double pos = 0, neg = 0, self = 0;
    while (end < order.size() && scores[order[end]] == scores[order[g]]) {
      const double p = positive_prob[order[end]];
      pos += p;
      neg += 1 - p;
      self += p * (1 - p);
      ++end;
    }
    // Pairs within the group: sum_{i != j} p_i (1 - p_j) = pos * neg - self, each worth 1/2.
    right += pos * neg_below + 0.5 * (pos * neg - self);
    neg_below += neg;
    pos_total += pos;
    neg_total += neg;
    self_pairs += self;
    g = end;
  }
  const double pairs = pos_total * neg_total - self_pairs;
  if (!(pairs > 0)) return 0.5;
  return right / pairs;
}

double auc(const std::vector<double>& scores, const std::vector<double>& labels) {
  std::vector<double> p(labels.size());
  for (size_t i = 0; i < labels.size(); ++i) p[i] = labels[i] > 0.5 ? 1.0 : 0.0;
  return auc_expected(scores, p);
}

double auc(const Tensor& scores, const Tensor& labels) {
  return auc(as_doubles(scores, "scores"), as_doubles(labels, "labels"));
}

Gathered gather_scores(const Tensor& scores, const Tensor& labels, const Group& group) {
  FERRY_CHECK(scores.defined() && labels.defined() && scores.numel() == labels.numel(),
              InvalidArgument, "gather_scores: scores and labels must have equal numbers of "
              "elements (got ", scores.defined() ? scores.numel() : -1, " and ",
              labels.defined() ? labels.numel() : -1, ")");
  // One all_gather_v of [n, 2] rows (score, label): the pairs stay together.
  const int64_t n = scores.numel();
  Tensor rows = empty({n, 2}, DType::Float64);
  for (int64_t i = 0; i < n; ++i) {
    rows.set_flat(2 * i, scores.get_flat(i));
    rows.set_flat(2 * i + 1, labels.get_flat(i));
  }
  Work work = all_gather_v(rows, group);
  const Tensor all = work.output(0);
  const int64_t total = all.size(0);
  Gathered out{empty({total}, DType::Float64), empty({total}, DType::Float64)};
  for (int64_t i = 0; i < total; ++i) {
    out.scores.set_flat(i, all.get_flat(2 * i));
    out.labels.set_flat(i, all.get_flat(2 * i + 1));
  }
  return out;
}

double gathered_auc(const Tensor& scores, const Tensor& labels, const Group& group) {
  const Gathered all = gather_scores(scores, labels, group);
  return auc(all.scores, all.labels);
}

}  // namespace ferry::torchrec
