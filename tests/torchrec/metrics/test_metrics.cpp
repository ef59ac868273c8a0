// Metrics: AUC with ties counted half (hand-computed), its independence of sample order, one
// class -> 0.5, the soft-label form, accuracy at 0.5, clamped log loss, and the gathered forms
// over ranks holding different numbers of samples.
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/run_ranks.h>
#include <ferry/collectives/torchrec/torchrec.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

using namespace ferry;
using namespace ferry::torchrec;
using Catch::Matchers::Contains;

TEST_CASE("auc: rank-sum value with ties counted half", "[metrics]") {
  // No ties: pairs (0.35 vs 0.1) right, (0.35 vs 0.4) wrong, 0.8 beats both -> 3/4.
  CHECK(auc(std::vector<double>{0.1, 0.4, 0.35, 0.8}, {0, 0, 1, 1}) == 0.75);
  // A tie between a positive and a negative: (0.5 vs 0.5) = 1/2, the other three pairs 1.
  const std::vector<double> s = {0.5, 0.5, 0.2, 0.9}, y = {1, 0, 0, 1};
  CHECK(auc(s, y) == 0.875);
  // Any order of the samples gives the same value (torchrec's sample-by-sample integration
  // would not, for the tie).
  CHECK(auc(std::vector<double>{0.5, 0.9, 0.2, 0.5}, {0, 1, 0, 1}) == 0.875);
  CHECK(auc(std::vector<double>{0.9, 0.2, 0.5, 0.5}, {1, 0, 1, 0}) == 0.875);
  // Ties among positives only do not matter: 2 positives at 0.7 over 2 negatives -> 1.
  CHECK(auc(std::vector<double>{0.7, 0.7, 0.1, 0.3}, {1, 1, 0, 0}) == 1.0);
  CHECK(auc(std::vector<double>{0.7, 0.7, 0.1, 0.3}, {0, 0, 1, 1}) == 0.0);
  // Everything tied -> 1/2; one class or nothing -> 1/2.
  CHECK(auc(std::vector<double>{0.3, 0.3, 0.3}, {1, 0, 1}) == 0.5);
  CHECK(auc(std::vector<double>{0.1, 0.9}, {1, 1}) == 0.5);
  CHECK(auc(std::vector<double>{0.1, 0.9}, {0, 0}) == 0.5);
  CHECK(auc(std::vector<double>{}, {}) == 0.5);
  // 3 positives, 2 negatives with a three-way tie: scores p: 1, 2, 2; n: 2, 0.
  // p=1: beats 0 (1), loses to 2 (0) -> 1; each p=2: beats 0 (1), ties 2 (1/2) -> 1.5 each.
  CHECK(auc(std::vector<double>{1, 2, 2, 2, 0}, {1, 1, 1, 0, 0}) == Approx(4.0 / 6));
  // Tensors of any float dtype and shape.
  CHECK(auc(from_vector<float>({0.5F, 0.5F, 0.2F, 0.9F}, {2, 2}), from_vector<float>({1, 0, 0, 1})) ==
        0.875);
  CHECK_THROWS_WITH(auc(std::vector<double>{0.1}, {1, 0}), Contains("1 scores but 2 labels"));
  CHECK_THROWS_WITH(auc(std::vector<double>{std::nan(""), 0.2}, {1, 0}), Contains("NaN"));
}

TEST_CASE("auc_expected: soft labels", "[metrics]") {
  // p in {0, 1} is auc().
  CHECK(auc_expected({0.5, 0.5, 0.2, 0.9}, {1, 0, 0, 1}) == 0.875);
  // Two samples at p = 0.5: as likely right as wrong.
  CHECK(auc_expected({1, 2}, {0.5, 0.5}) == 0.5);
  // Scores 1, 2 with p 0.2, 0.9: right 0.9 * 0.8, wrong 0.2 * 0.1.
  CHECK(auc_expected({1, 2}, {0.2, 0.9}) == Approx(0.72 / 0.74));
  // A tie between them: every pair is worth 1/2.
  CHECK(auc_expected({1, 1}, {0.2, 0.9}) == Approx(0.5));
  CHECK(auc_expected({1, 2, 3}, {1, 1, 1}) == 0.5);
}

TEST_CASE("accuracy at 0.5 and clamped log loss", "[metrics]") {
  const Tensor p = from_vector<double>({0.2, 0.5, 0.7, 0.4});
  const Tensor y = from_vector<double>({0, 1, 0, 0});
  CHECK(accuracy(p, y) == 0.75);  // 0.5 counts as positive
  CHECK(accuracy(p, y, 0.3) == 0.5);  // 0.5, 0.7 and 0.4 predicted positive
  CHECK(log_loss(from_vector<double>({0.8, 0.3}), from_vector<double>({1, 0})) ==
        Approx((-std::log(0.8) - std::log(0.7)) / 2).epsilon(1e-12));
  // p = 0 and 1 on the wrong side: clamped to 1e-7, finite.
  const double clamped = log_loss(from_vector<double>({0, 1}), from_vector<double>({1, 0}));
  CHECK(clamped == Approx(-std::log(1e-7)).epsilon(1e-9));
  CHECK(log_loss(from_vector<double>({0, 1}), from_vector<double>({0, 1})) < 1e-6);
  CHECK(accuracy(Tensor(empty({0})), Tensor(empty({0}))) == 0);
  const BinaryMetrics m = binary_metrics(p, y);
  CHECK(m.count == 4);
  CHECK(m.accuracy == 0.75);
  CHECK(m.auc == auc(p, y));
  CHECK(m.log_loss == log_loss(p, y));
  CHECK_THROWS_WITH(accuracy(p, from_vector<double>({1})), Contains("accuracy"));
}

TEST_CASE("gathered metrics: the union of every rank's samples", "[metrics]") {
  // Rank r holds samples r, r + 3, ... of one list; rank 1 holds none.
  const std::vector<double> scores = {0.9, 0.5, 0.4, 0.5, 0.1, 0.7, 0.3};
  const std::vector<double> labels = {1, 0, 1, 1, 0, 0, 1};
  const std::vector<std::vector<int>> owned = {{0, 2, 5}, {}, {1, 3, 4, 6}};
  const double expected_auc = auc(scores, labels);
  const BinaryMetrics expected =
      binary_metrics(from_vector<double>(scores), from_vector<double>(labels));
  std::vector<double> got_auc(3);
  std::vector<BinaryMetrics> got(3);
  run_ranks(3, [&](Group& world) {
    const auto r = static_cast<size_t>(world.rank());
    std::vector<float> s, y;
    for (int i : owned[r]) {
      s.push_back(static_cast<float>(scores[static_cast<size_t>(i)]));
      y.push_back(static_cast<float>(labels[static_cast<size_t>(i)]));
    }
    got_auc[r] = gathered_auc(from_vector<float>(s), from_vector<float>(y), world);
    got[r] = gathered_binary_metrics(from_vector<float>(s), from_vector<float>(y), world);
  });
  for (size_t r = 0; r < 3; ++r) {
    CAPTURE(r);
    CHECK(got_auc[r] == expected_auc);
    CHECK(got[r].count == 7);
    CHECK(got[r].auc == expected_auc);
    CHECK(got[r].accuracy == expected.accuracy);
    CHECK(got[r].log_loss == Approx(expected.log_loss).epsilon(1e-6));  // float32 inputs
  }
  CHECK(expected_auc != 0.5);
}
