#include <ferry/collectives/torchrec/metrics/binary_metrics.h>

#include <ferry/collectives/torchrec/metrics/auc.h>
#include <ferry/runtime/error.h>

#include <algorithm>
#include <cmath>

namespace ferry::torchrec {

namespace {

void check_pair(const char* op, const Tensor& predictions, const Tensor& labels) {
  FERRY_CHECK(predictions.defined() && labels.defined() &&
                  predictions.numel() == labels.numel(),
              InvalidArgument, op, ": predictions and labels must have equal numbers of "
              "elements (got ", predictions.defined() ? predictions.numel() : -1, " and ",
              labels.defined() ? labels.numel() : -1, ")");
}

}  // namespace

double accuracy(const Tensor& predictions, const Tensor& labels, double threshold) {
  check_pair("accuracy", predictions, labels);
  const int64_t n = predictions.numel();
  if (n == 0) return 0;
  int64_t right = 0;
  for (int64_t i = 0; i < n; ++i) {
    right += (predictions.get_flat(i) >= threshold) == (labels.get_flat(i) > 0.5);
  }
  return static_cast<double>(right) / static_cast<double>(n);
}

double log_loss(const Tensor& predictions, const Tensor& labels, double eps) {
  check_pair("log_loss", predictions, labels);
  FERRY_CHECK(eps > 0 && eps < 0.5, InvalidArgument, "log_loss: eps must be in (0, 0.5), got ",
              eps);
  const int64_t n = predictions.numel();
  if (n == 0) return 0;
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double p = std::clamp(predictions.get_flat(i), eps, 1 - eps);
    const double y = labels.get_flat(i);
    total -= y * std::log(p) + (1 - y) * std::log1p(-p);
  }
  return total / static_cast<double>(n);
}

BinaryMetrics binary_metrics(const Tensor& predictions, const Tensor& labels) {
  check_pair("binary_metrics", predictions, labels);
  return BinaryMetrics{auc(predictions, labels), accuracy(predictions, labels),
                       log_loss(predictions, labels), predictions.numel()};
}

BinaryMetrics gathered_binary_metrics(const Tensor& predictions, const Tensor& labels,
                                      const Group& group) {
  const Gathered all = gather_scores(predictions, labels, group);
  return binary_metrics(all.scores, all.labels);
}

}  // namespace ferry::torchrec
