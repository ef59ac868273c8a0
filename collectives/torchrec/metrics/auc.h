// ferry::torchrec AUC: the area under the ROC curve of binary scores, exactly, with tied scores
// counted half (the Mann-Whitney / rank-sum value):
//
//   AUC = (sum over positive-negative pairs of [s_pos > s_neg] + 0.5 [s_pos == s_neg])
//         / (n_pos * n_neg)
//
// computed by one sort (O(n log n)) with every group of equal scores taking its average rank.
// The result does not depend on the order of the samples. A set without both classes (or empty)
// gives 0.5. Scores may be probabilities or logits (only their order matters); labels are 0 or
// 1 (a label > 0.5 counts as positive). NaN scores throw InvalidArgument.
//
// Deliberate difference from torchrec's AUC metric: torchrec sorts by score and integrates the
// curve sample by sample without grouping ties, so with tied scores its value depends on the
// input order; ferry groups ties. torchrec also supports weights and windows; these do not.
//
// Distributed: gathered_auc all_gathers every rank's scores and labels (all_gather_v, ranks may
// hold different counts) and computes the exact AUC of the union on every rank; every rank
// returns the same value. (Not a histogram approximation.)
#pragma once

#include <ferry/runtime/tensor.h>

#include <vector>

namespace ferry {
class Group;
}

namespace ferry::torchrec {

// scores and labels: equal numbers of elements (any shape, any float or int dtype).
double auc(const Tensor& scores, const Tensor& labels);
double auc(const std::vector<double>& scores, const std::vector<double>& labels);

// The same pair statistic with soft labels: sample i is positive with probability p_i. Returns
// E[pairs ordered right] / E[positive-negative pairs] over labels drawn independently (pairs of
// distinct samples). With p in {0, 1} this is auc(). Used to state a generator's Bayes AUC
// without sampling noise.
double auc_expected(const std::vector<double>& scores, const std::vector<double>& positive_prob);

// This rank's scores and labels, all_gathered over `group`; the AUC of all of them.
double gathered_auc(const Tensor& scores, const Tensor& labels, const Group& group);

// scores and labels of every rank, concatenated in rank order (float64, 1-D each), via
// all_gather_v. Shared with the other gathered metrics.
struct Gathered {
  Tensor scores;
  Tensor labels;
};
Gathered gather_scores(const Tensor& scores, const Tensor& labels, const Group& group);

}  // namespace ferry::torchrec
