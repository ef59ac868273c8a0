// Datasets: the sharded batch schedule (drop_last, even_batches, uneven ranks), the synthetic
// generator (determinism, shapes, ranges, power-law ids, bag lengths, shards covering the split
// once, labels following the hidden model, its Bayes AUC, the tabulated draws against the
// closed-form model) and the Criteo TSV reader on a tiny file written here.
#include <ferry/collectives/torchrec/torchrec.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <numbers>
#include <set>
#include <string>
#include <vector>

using namespace ferry;
using namespace ferry::torchrec;
using Catch::Matchers::Contains;

namespace {

std::vector<int64_t> batch_sizes(int64_t n, ShardOptions o) {
  const ShardSchedule s(n, o);
  std::vector<int64_t> out;
  for (int64_t i = 0; i < s.num_batches(); ++i) out.push_back(s.batch_size(i));
  return out;
}

std::vector<int64_t> firsts(int64_t n, ShardOptions o) {
  const ShardSchedule s(n, o);
  std::vector<int64_t> out;
  for (int64_t i = 0; i < s.num_batches(); ++i) out.push_back(s.first_sample(i));
  return out;
}

uint64_t mix64(uint64_t x) {  // splitmix64's finaliser, as the generator's hash
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// e_t(id) recomputed from its definition: a Box-Muller normal from the counter-seeded stream of
// the hash of (seed, t, id).
double reference_effect(uint64_t seed, int64_t table, int64_t id) {
  uint64_t state = mix64(mix64(seed ^ 0xeffec7) ^ mix64(static_cast<uint64_t>(table) << 40) ^
                         static_cast<uint64_t>(id));
  const uint64_t a = mix64(state += 0x9e3779b97f4a7c15ULL);
  const uint64_t b = mix64(state += 0x9e3779b97f4a7c15ULL);
  const double u1 = (static_cast<double>(a >> 11) + 0.5) * 0x1.0p-53;
  const double u2 = static_cast<double>(b >> 11) * 0x1.0p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

// The power law's mass of rank k: [k + 1, k + 2) under density ∝ x^-s on [1, n + 1).
double reference_mass(int64_t n, double s, int64_t k) {
  const auto f = [&](double x) {
    return s == 1.0 ? std::log(x) / std::log(n + 1.0)
                    : (std::pow(x, 1 - s) - 1) / (std::pow(n + 1.0, 1 - s) - 1);
  };
  return f(static_cast<double>(k) + 2) - f(static_cast<double>(k) + 1);
}

}  // namespace

TEST_CASE("ShardSchedule: batches by rank, drop_last and even_batches", "[datasets]") {
  // 10 samples, batches of 3, 2 ranks: full batches 0, 1, 2 (+ a short one of 1 sample).
  CHECK(firsts(10, {.batch_size = 3, .rank = 0, .world_size = 2}) == std::vector<int64_t>{0});
  CHECK(firsts(10, {.batch_size = 3, .rank = 1, .world_size = 2}) == std::vector<int64_t>{3});
  CHECK(firsts(10, {.batch_size = 3, .rank = 0, .world_size = 2, .even_batches = false}) ==
        std::vector<int64_t>{0, 6});
  CHECK(firsts(10, {.batch_size = 3, .rank = 1, .world_size = 2, .even_batches = false}) ==
        std::vector<int64_t>{3});
  // Keeping the short batch: 4 batches, even over 2 ranks; rank 1's last has 1 sample.
  CHECK(batch_sizes(10, {.batch_size = 3, .rank = 1, .world_size = 2, .drop_last = false}) ==
        std::vector<int64_t>{3, 1});
  // 3 ranks, short batch kept, uneven: rank 0 gets batches 0 and 3 (the short one).
  CHECK(batch_sizes(10, {.batch_size = 3, .rank = 0, .world_size = 3, .drop_last = false,
                         .even_batches = false}) == std::vector<int64_t>{3, 1});
  CHECK(batch_sizes(10, {.batch_size = 3, .rank = 2, .world_size = 3, .drop_last = false,
                         .even_batches = false}) == std::vector<int64_t>{3});
  // Even with 4 batches over 3 ranks: one each, the 4th dropped.
  CHECK(batch_sizes(10, {.batch_size = 3, .rank = 0, .world_size = 3, .drop_last = false}) ==
        std::vector<int64_t>{3});
  // More ranks than batches.
  CHECK(ShardSchedule(5, {.batch_size = 2, .rank = 3, .world_size = 4, .even_batches = false})
            .num_batches() == 0);
  CHECK_THROWS_WITH(ShardSchedule(5, {.batch_size = 0}), Contains("batch_size"));
  CHECK_THROWS_WITH(ShardSchedule(5, {.rank = 2, .world_size = 2}), Contains("rank 2 of 2"));
}

TEST_CASE("SyntheticCriteo: shapes, ranges, determinism", "[datasets]") {
  const std::vector<int64_t> cards = default_cardinalities(26);
  CHECK(cards.front() == 100);
  CHECK(cards.back() == 1000000);
  CHECK(std::is_sorted(cards.begin(), cards.end()));
  CHECK(default_cardinalities(1) == std::vector<int64_t>{100});

  const SyntheticCriteo data({.num_train = 1000, .num_test = 200, .seed = 5});
  const Batch b = data.batch(Split::Train, 10, 32);
  CHECK(b.dense.shape() == Shape{32, 13});
  CHECK(b.dense.dtype() == DType::Float32);
  CHECK(b.labels.shape() == Shape{32});
  CHECK(b.sparse.keys() == criteo_sparse_keys(26));
  CHECK(b.sparse.keys()[25] == "cat_25");
  CHECK(b.sparse.stride() == 32);
  const std::vector<int64_t> lengths = b.sparse.lengths().to_vector<int64_t>();
  CHECK(*std::min_element(lengths.begin(), lengths.end()) >= 1);
  CHECK(*std::max_element(lengths.begin(), lengths.end()) <= 20);
  for (int64_t t = 0; t < 26; ++t) {
    const std::vector<int64_t> ids = b.sparse[criteo_sparse_keys(26)[static_cast<size_t>(t)]]
                                         .values().to_vector<int64_t>();
    for (int64_t id : ids) {
      REQUIRE(id >= 0);
      REQUIRE(id < cards[static_cast<size_t>(t)]);
    }
  }
  for (int64_t i = 0; i < 32; ++i) CHECK((b.labels.get_flat(i) == 0 || b.labels.get_flat(i) == 1));
  // Deterministic in (seed, split, n); batching does not change a sample.
  CHECK(equal(b.dense, SyntheticCriteo({.num_train = 1000, .num_test = 200, .seed = 5})
                           .batch(Split::Train, 10, 32).dense));
  CHECK(equal(data.batch(Split::Train, 20, 4).dense, b.dense.narrow(0, 10, 4)));
  CHECK_FALSE(equal(SyntheticCriteo({.num_train = 1000, .seed = 6}).batch(Split::Train, 10, 32).dense,
                    b.dense));
  CHECK_FALSE(equal(data.batch(Split::Test, 10, 32).dense, b.dense));
  CHECK_THROWS_WITH(data.sample(Split::Test, 200), Contains("out of range"));
  CHECK_THROWS_WITH(SyntheticCriteo({.num_sparse = 2, .cardinalities = {10}}),
                    Contains("1 cardinalities for 2"));
}

TEST_CASE("SyntheticCriteo: power-law ids and bag lengths", "[datasets]") {
  const SyntheticCriteo data({.num_sparse = 2, .cardinalities = {10000, 100},
                              .mean_pooling_factor = 4.0, .num_train = 4000, .seed = 1});
  std::map<int64_t, int64_t> counts;
  int64_t ids = 0, bags = 0;
  for (int64_t n = 0; n < 4000; ++n) {
    const auto s = data.sample(Split::Train, n);
    for (int64_t id : s.bags[0]) ++counts[id];
    ids += static_cast<int64_t>(s.bags[0].size());
    ++bags;
  }
  CHECK(static_cast<double>(ids) / static_cast<double>(bags) == Approx(4.0).margin(0.15));
  std::vector<int64_t> sorted;
  for (auto [id, c] : counts) sorted.push_back(c);
  std::sort(sorted.rbegin(), sorted.rend());
  // The most popular id is popularity rank 0's, and it is far above the typical id.
  CHECK(counts[data.id_of_rank(0, 0)] == sorted[0]);
  CHECK(sorted[0] > 20 * sorted[sorted.size() / 2]);
  // The top 1% of the table's ids (100) take a large share of the draws (~half for s near 1).
  int64_t top = 0;
  for (size_t i = 0; i < std::min<size_t>(100, sorted.size()); ++i) top += sorted[i];
  CHECK(static_cast<double>(top) / static_cast<double>(ids) > 0.35);
  // Hot ids are spread over the table, not packed at row 0.
  CHECK(data.id_of_rank(0, 1) != 1);
}

TEST_CASE("SyntheticCriteo: dense features are N(0, 1), bag lengths 1 + Poisson(mean - 1)",
          "[datasets]") {
  // The generator draws both by its own means (polar normals, a tabulated Poisson CDF): their
  // moments and frequencies against the documented laws, within 5 standard deviations.
  const int64_t n = 20000;
  const SyntheticCriteo data({.num_train = n, .seed = 3});
  const Batch b = data.batch(Split::Train, 0, n);
  const std::vector<float> x = b.dense.to_vector<float>();
  double sum = 0, sum2 = 0, sum4 = 0;
  int64_t beyond = 0;
  for (float v : x) {
    sum += v;
    sum2 += static_cast<double>(v) * v;
    sum4 += static_cast<double>(v) * v * v * v;
    beyond += std::abs(v) > 1.959964 ? 1 : 0;
  }
  const auto m = static_cast<double>(x.size());
  CHECK(sum / m == Approx(0).margin(5 / std::sqrt(m)));
  CHECK(sum2 / m == Approx(1).margin(5 * std::sqrt(2 / m)));
  CHECK(sum4 / m == Approx(3).margin(5 * std::sqrt(96 / m)));
  CHECK(static_cast<double>(beyond) / m == Approx(0.05).margin(5 * std::sqrt(0.05 * 0.95 / m)));
  // Neighbouring features of one sample (the two of a polar pair) are uncorrelated.
  double cross = 0;
  for (int64_t i = 0; i < n; ++i) {
    cross += x[static_cast<size_t>(i * 13)] * x[static_cast<size_t>(i * 13 + 1)];
  }
  CHECK(cross / static_cast<double>(n) == Approx(0).margin(5 / std::sqrt(static_cast<double>(n))));
  const std::vector<int64_t> lengths = b.sparse.lengths().to_vector<int64_t>();
  std::vector<int64_t> count(21, 0);
  for (int64_t l : lengths) ++count[static_cast<size_t>(l)];
  const auto bags = static_cast<double>(lengths.size());
  double pmf = std::exp(-2.0);  // Poisson(2) at 0
  for (int64_t l = 1; l <= 8; ++l) {
    CAPTURE(l);
    const double sigma = std::sqrt(pmf * (1 - pmf) / bags);
    CHECK(static_cast<double>(count[static_cast<size_t>(l)]) / bags ==
          Approx(pmf).margin(5 * sigma));
    pmf *= 2.0 / static_cast<double>(l);
  }
  CHECK(count[0] == 0);
}

TEST_CASE("SyntheticCriteoSource: every rank reads only its shard; the shards cover the split",
          "[datasets]") {
  const SyntheticCriteo data({.num_sparse = 3, .cardinalities = {100, 1000, 10000},
                              .num_train = 50, .num_test = 10, .seed = 2});
  std::multiset<float> seen;  // the first dense feature identifies a sample
  std::vector<int64_t> counts;
  for (int r = 0; r < 3; ++r) {
    SyntheticCriteoSource source(data, Split::Train,
                                 {.batch_size = 4, .rank = r, .world_size = 3,
                                  .drop_last = false, .even_batches = false});
    int64_t batches = 0;
    while (auto batch = source.next_batch()) {
      const int64_t first = ShardSchedule(50, {.batch_size = 4, .rank = r, .world_size = 3,
                                               .drop_last = false, .even_batches = false})
                                .first_sample(batches);
      CHECK(equal(batch->dense, data.batch(Split::Train, first, batch->size()).dense));
      for (int64_t i = 0; i < batch->size(); ++i) seen.insert(static_cast<float>(batch->dense.get_flat(i * 13)));
      ++batches;
    }
    CHECK(batches == source.num_batches());
    counts.push_back(batches);
    source.reset();
    CHECK(source.next_batch().has_value());
  }
  // 13 batches (the last of 2 samples): ranks get 5, 4, 4.
  CHECK(counts == std::vector<int64_t>{5, 4, 4});
  CHECK(seen.size() == 50);
  for (int64_t n = 0; n < 50; ++n) {
    CHECK(seen.count(data.sample(Split::Train, n).dense[0]) == 1);
  }
}

TEST_CASE("SyntheticCriteo: labels follow the hidden model; Bayes AUC", "[datasets]") {
  const SyntheticCriteo data({.num_train = 8, .num_test = 20000, .seed = 0});
  // The drawn labels against the true probabilities: their empirical AUC is close to the Bayes
  // AUC the generator states, and the positive rate to the mean probability.
  std::vector<double> p, y;
  for (int64_t n = 0; n < 20000; ++n) {
    const auto s = data.sample(Split::Test, n);
    p.push_back(s.probability);
    y.push_back(s.label);
  }
  const double bayes = data.bayes_auc(20000);
  const double dense_only = data.dense_only_auc(20000);
  CAPTURE(bayes, dense_only);
  CHECK(auc(p, y) == Approx(bayes).margin(0.01));
  double mean_p = 0, mean_y = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    mean_p += p[i];
    mean_y += y[i];
  }
  CHECK(mean_y / 20000 == Approx(mean_p / 20000).margin(0.01));
  // Both parts of the hidden model carry signal.
  CHECK(bayes > 0.75);
  CHECK(dense_only > 0.6);
  CHECK(bayes > dense_only + 0.05);
  // The stated value for the default configuration (docs/torchrec/modules.md).
  CHECK(SyntheticCriteo({}).bayes_auc() == Approx(bayes).margin(0.01));
}

TEST_CASE("CriteoTsvSource: parses Criteo's TSV and shards it", "[datasets]") {
  const std::string path = "test_datasets_tiny.tsv";
  {
    std::ofstream out(path);
    for (int line = 0; line < 5; ++line) {
      out << (line % 2);  // label
      for (int i = 0; i < 13; ++i) {
        out << '\t';
        if (i == 0) out << line;          // 0..4
        else if (i == 1) out << -3;       // negative -> 0
        else if (i == 2) out << "";       // empty -> 0
        else out << i;
      }
      for (int t = 0; t < 26; ++t) {
        out << '\t';
        if (t == 0) out << "1f";                  // 31
        else if (t == 1 && line == 2) out << "";  // empty bag
        else if (t == 2) out << "ffffffffffffffff";
        else out << std::hex << (line * 100 + t) << std::dec;
      }
      out << '\n';
    }
  }
  std::vector<int64_t> cards(26, 10);
  cards[2] = 1000;
  CriteoTsvSource rank0({.path = path, .cardinalities = cards},
                        {.batch_size = 2, .rank = 0, .world_size = 2, .drop_last = false,
                         .even_batches = false});
  CHECK(rank0.num_lines() == 5);
  CHECK(rank0.num_batches() == 2);  // lines 0-1 and 4
  auto first = rank0.next_batch();
  REQUIRE(first.has_value());
  CHECK(first->labels.to_vector<float>() == std::vector<float>{0, 1});
  // torchrec's log(v + 3); -3 is read as -2 (log 1 = 0); empty as 0 (log 3).
  CHECK(first->dense.get_flat(13) == Approx(std::log(4.0)));  // line 1, column 0
  CHECK(first->dense.get_flat(1) == 0);
  CHECK(first->dense.get_flat(2) == Approx(std::log(3.0)));
  CHECK(first->dense.get_flat(3) == Approx(std::log(6.0)));
  CHECK(first->sparse["cat_0"].values().to_vector<int64_t>() == std::vector<int64_t>{1, 1});
  CHECK(first->sparse["cat_2"].values().to_vector<int64_t>() ==
        std::vector<int64_t>{615, 615});  // 2^64 - 1 mod 1000
  CHECK(first->sparse["cat_3"].values().to_vector<int64_t>() ==
        std::vector<int64_t>{3, 103 % 10});
  auto second = rank0.next_batch();
  REQUIRE(second.has_value());
  CHECK(second->size() == 1);
  CHECK(second->dense.get_flat(0) == Approx(std::log(7.0)));
  CHECK_FALSE(rank0.next_batch().has_value());

  CriteoTsvSource rank1({.path = path, .cardinalities = cards},
                        {.batch_size = 2, .rank = 1, .world_size = 2, .drop_last = false,
                         .even_batches = false});
  auto b = rank1.next_batch();
  REQUIRE(b.has_value());
  CHECK(b->dense.get_flat(0) == Approx(std::log(5.0)));  // line 2
  // An empty categorical is id 0, as torchrec's "0" fill: every bag holds one id.
  CHECK(b->sparse["cat_1"].lengths().to_vector<int64_t>() == std::vector<int64_t>{1, 1});
  CHECK(b->sparse["cat_1"].values().to_vector<int64_t>() ==
        std::vector<int64_t>{0, (3 * 100 + 1) % 10});
  CHECK_FALSE(rank1.next_batch().has_value());

  {
    std::ofstream out(path, std::ios::app);
    out << "1\t2\t3\n";
  }
  CriteoTsvSource broken({.path = path, .cardinalities = cards}, {.batch_size = 6});
  CHECK_THROWS_WITH(broken.next_batch(), Contains("line 6") && Contains("3 columns"));
  std::remove(path.c_str());
  CHECK_THROWS_WITH(CriteoTsvSource({.path = path}, {}), Contains("cannot open"));
}

TEST_CASE("SyntheticCriteo: the tabulated rank draw against the closed-form power law",
          "[datasets]") {
  struct Case {
    int64_t n;
    double s;
    int64_t tabulated;
  };
  const Case c = GENERATE(Case{1, 1.05, 16}, Case{100, 1.05, 1 << 16}, Case{10000, 1.05, 1 << 16},
                          Case{1000000, 1.05, 1 << 16}, Case{1000, 1.0, 1 << 16},
                          Case{1000, 2.5, 100}, Case{5000, 0.5, 0}, Case{300, 1.05, 299});
  CAPTURE(c.n, c.s, c.tabulated);
  const torchrec::detail::PowerLawRanks ranks(c.n, c.s, c.tabulated);
  CHECK(ranks.tabulated() == std::min(c.n, c.tabulated));
  // The analytical masses.
  double total = 0;
  for (int64_t k = 0; k < std::min<int64_t>(c.n, 1000); ++k) {
    if (k + 1 < c.n) CHECK(ranks.probability(k) == Approx(reference_mass(c.n, c.s, k)));
    total += ranks.probability(k);
  }
  if (c.n <= 1000) CHECK(total == Approx(1.0));
  // The same rank as the closed-form inverse CDF for every uniform drawn, and head frequencies
  // at the analytical masses (within 5 standard deviations).
  const int64_t draws = 200000;
  uint64_t state = 12345;
  int64_t mismatches = 0;
  std::vector<int64_t> head(4, 0);
  for (int64_t i = 0; i < draws; ++i) {
    const double u = static_cast<double>(mix64(state += 0x9e3779b97f4a7c15ULL) >> 11) * 0x1.0p-53;
    const int64_t k = ranks.rank(u);
    mismatches += k != ranks.inverse_cdf_rank(u) ? 1 : 0;
    REQUIRE(k >= 0);
    REQUIRE(k < c.n);
    if (k < 4) ++head[static_cast<size_t>(k)];
  }
  CHECK(mismatches == 0);
  for (int64_t k = 0; k < std::min<int64_t>(c.n, 4); ++k) {
    const double p = ranks.probability(k);
    const double sigma = std::sqrt(p * (1 - p) / static_cast<double>(draws));
    CHECK(static_cast<double>(head[static_cast<size_t>(k)]) / static_cast<double>(draws) ==
          Approx(p).margin(5 * sigma + 1e-12));
  }
  // The edges of the uniform's range.
  CHECK(ranks.rank(0.0) == 0);
  CHECK(ranks.rank(0.0) == ranks.inverse_cdf_rank(0.0));
  CHECK(ranks.rank(1.0 - 0x1.0p-53) == ranks.inverse_cdf_rank(1.0 - 0x1.0p-53));
  CHECK_THROWS_WITH(torchrec::detail::PowerLawRanks(0, 1.0, 4), Contains("1 <= n"));
}

TEST_CASE("SyntheticCriteo: tabulated samples equal the closed-form model's", "[datasets]") {
  // Default cardinalities (10^2..10^6): with 2^16 tabulated ranks the large tables' tails take
  // the closed form; 50 tabulated ranks cross the head/tail boundary all the time; 0 evaluates
  // every draw and e_t in closed form (the generator before tabulation).
  const SyntheticCriteoConfig base{.num_train = 3000, .num_test = 10, .seed = 4};
  SyntheticCriteoConfig few = base, none = base;
  few.max_tabulated_rows = 50;
  none.max_tabulated_rows = 0;
  const SyntheticCriteo fast(base), partial(few), reference(none);
  CHECK(fast.ranks(0).tabulated() == 100);
  CHECK(fast.ranks(25).tabulated() == 1 << 16);
  CHECK(reference.ranks(25).tabulated() == 0);
  int64_t differing = 0;
  for (int64_t n = 0; n < 3000; ++n) {
    const auto a = fast.sample(Split::Train, n);
    const auto b = partial.sample(Split::Train, n);
    const auto r = reference.sample(Split::Train, n);
    const bool same = a.dense == r.dense && a.bags == r.bags && a.label == r.label &&
                      a.probability == r.probability && b.bags == r.bags &&
                      b.probability == r.probability && b.label == r.label;
    differing += same ? 0 : 1;
  }
  CHECK(differing == 0);
  // The probability is the documented hidden model, with e_t recomputed from its definition.
  const SyntheticCriteoConfig& cfg = fast.config();
  for (int64_t n = 0; n < 200; ++n) {
    const auto smp = fast.sample(Split::Train, n);
    double logit = cfg.bias;
    for (int64_t i = 0; i < cfg.num_dense; ++i) {
      logit += fast.dense_weights()[static_cast<size_t>(i)] *
               static_cast<double>(smp.dense[static_cast<size_t>(i)]);
    }
    double sparse = 0;
    for (int64_t t = 0; t < cfg.num_sparse; ++t) {
      double sum = 0;
      for (int64_t id : smp.bags[static_cast<size_t>(t)]) {
        const double e = reference_effect(cfg.seed, t, id);
        REQUIRE(fast.table_effect(t, id) == e);
        sum += e;
      }
      sparse += sum / static_cast<double>(smp.bags[static_cast<size_t>(t)].size());
    }
    logit += cfg.sparse_scale / std::sqrt(static_cast<double>(cfg.num_sparse)) * sparse;
    CHECK(smp.probability == Approx(1 / (1 + std::exp(-logit))).epsilon(1e-12));
  }
  CHECK_THROWS_WITH(SyntheticCriteo({.max_tabulated_rows = -1}), Contains("max_tabulated_rows"));
}
