// ferry::torchrec binary-classification metrics besides AUC (auc.h): accuracy at threshold 0.5
// and log loss, and all three together, locally or over the ranks of a Group.
//
//   accuracy   fraction of samples with (p >= 0.5) == (label > 0.5); 0 for an empty set.
//   log_loss   mean of -(y log p + (1 - y) log(1 - p)) with p clamped to [eps, 1 - eps]
//              (eps = 1e-7 by default), so p = 0 or 1 gives a finite loss; 0 for an empty set.
//              Labels may be soft (y in [0, 1]).
// `predictions` are probabilities (sigmoid of the logits). Weighted and windowed variants of
// torchrec's RecMetrics are not provided.
#pragma once

#include <ferry/runtime/tensor.h>

#include <cstdint>

namespace ferry {
class Group;
}

namespace ferry::torchrec {

double accuracy(const Tensor& predictions, const Tensor& labels, double threshold = 0.5);
double log_loss(const Tensor& predictions, const Tensor& labels, double eps = 1e-7);

struct BinaryMetrics {
  double auc = 0.5;
  double accuracy = 0;
  double log_loss = 0;
  int64_t count = 0;
};

BinaryMetrics binary_metrics(const Tensor& predictions, const Tensor& labels);
// Over all ranks' samples (gather_scores, then exactly as binary_metrics); the same on every
// rank.
BinaryMetrics gathered_binary_metrics(const Tensor& predictions, const Tensor& labels,
                                      const Group& group);

}  // namespace ferry::torchrec
