// KeyedTensor: per-key access, to_dict, regroup, from_tensor_list, validation.
#include <ferry/collectives/torchrec/torchrec.h>
#include "tests/torchrec/jagged_test_util.h"

#include <catch2/catch.hpp>

using namespace ferry;
using namespace ferry::torchrec;
using namespace ferry::torchrec::testing;
using Catch::Matchers::Contains;

namespace {

// keys a (2 columns), b (1); B = 2
KeyedTensor kt_ab() {
  return KeyedTensor({"a", "b"}, {2, 1}, from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
}
// keys c (3 columns), d (1)
KeyedTensor kt_cd() {
  return KeyedTensor({"c", "d"}, {3, 1},
                     from_vector<float>({10, 11, 12, 13, 20, 21, 22, 23}, {2, 4}));
}

}  // namespace

TEST_CASE("KeyedTensor: per-key blocks and to_dict", "[keyed_tensor]") {
  KeyedTensor kt = kt_ab();
  CHECK(kt.offset_per_key() == V{0, 2, 3});
  CHECK(kt.key_dim() == 1);
  CHECK(kt["a"].shape() == Shape{2, 2});
  CHECK(dv(kt["a"]) == std::vector<double>{1, 2, 4, 5});
  CHECK(dv(kt["b"]) == std::vector<double>{3, 6});
  auto d = kt.to_dict();
  REQUIRE(d.size() == 2);
  CHECK(dv(d.at("a")) == std::vector<double>{1, 2, 4, 5});
  CHECK(dv(d.at("b")) == std::vector<double>{3, 6});
  CHECK_THROWS_WITH(kt["z"], Contains("no key \"z\" in keys [\"a\", \"b\"]"));

  // key_dim 0: rows per key, views
  KeyedTensor rows({"r", "s"}, {1, 2}, from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2}), 0);
  CHECK(dv(rows["s"]) == std::vector<double>{3, 4, 5, 6});
  CHECK(rows["s"].shares_storage_with(rows.values()));
}

TEST_CASE("KeyedTensor: from_tensor_list", "[keyed_tensor]") {
  KeyedTensor kt = KeyedTensor::from_tensor_list(
      {"a", "b"}, {from_vector<float>({1, 2, 4, 5}, {2, 2}), from_vector<float>({3, 6}, {2, 1})});
  CHECK(kt.length_per_key() == V{2, 1});
  CHECK(equal(kt.values(), kt_ab().values()));
}

TEST_CASE("KeyedTensor: regroup", "[keyed_tensor]") {
  std::vector<Tensor> g = KeyedTensor::regroup({kt_ab(), kt_cd()}, {{"c", "a"}, {"b"}, {"d", "a"}, {}});
  REQUIRE(g.size() == 4);
  CHECK(g[0].shape() == Shape{2, 5});
  CHECK(dv(g[0]) == std::vector<double>{10, 11, 12, 1, 2, 20, 21, 22, 4, 5});
  CHECK(dv(g[1]) == std::vector<double>{3, 6});
  CHECK(dv(g[2]) == std::vector<double>{13, 1, 2, 23, 4, 5});
  CHECK(g[3].shape() == Shape{2, 0});

  auto named = KeyedTensor::regroup_as_dict({kt_ab(), kt_cd()}, {{"a", "d"}, {"b"}}, {"x", "y"});
  CHECK(dv(named.at("x")) == std::vector<double>{1, 2, 13, 4, 5, 23});
  CHECK(dv(named.at("y")) == std::vector<double>{3, 6});

  CHECK_THROWS_WITH(KeyedTensor::regroup({kt_ab(), kt_cd()}, {{"a", "e"}}),
                    Contains("key \"e\" of group 0 is in none of the KeyedTensors"));
  CHECK_THROWS_WITH(KeyedTensor::regroup({kt_ab(), kt_ab()}, {{"a"}}),
                    Contains("key \"a\" is in KeyedTensor 0 and in KeyedTensor 1"));
  KeyedTensor three_rows({"e"}, {1}, from_vector<float>({1, 2, 3}, {3, 1}));
  CHECK_THROWS_WITH(KeyedTensor::regroup({kt_ab(), three_rows}, {{"a"}}),
                    Contains("KeyedTensor 1 has values [3, 1] but KeyedTensor 0 has [2, 3]"));
  KeyedTensor rows({"r"}, {2}, from_vector<float>({1, 2, 3, 4}, {2, 2}), 0);
  CHECK_THROWS_WITH(KeyedTensor::regroup({rows}, {{"r"}}), Contains("regroup needs key_dim 1"));
}

TEST_CASE("KeyedTensor: validation", "[keyed_tensor][validation]") {
  const Tensor v = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK_THROWS_WITH(KeyedTensor({"a", "b"}, {2, 2}, v),
                    Contains("KeyedTensor: length_per_key [2, 2] sums to 4 but values [2, 3] has 3 "
                             "along key_dim 1"));
  CHECK_THROWS_WITH(KeyedTensor({"a", "a"}, {2, 1}, v),
                    Contains("key \"a\" appears twice (positions 0 and 1)"));
  CHECK_THROWS_WITH(KeyedTensor({"a", "b"}, {4, -1}, v),
                    Contains("length of key \"b\" is negative: length_per_key [4, -1]"));
  CHECK_THROWS_WITH(KeyedTensor({"a"}, {3}, v, 2), Contains("key_dim 2 is out of range"));
  CHECK_THROWS_WITH(KeyedTensor({"a", "b"}, {3}, v), Contains("1 lengths [3] for 2 keys"));
}
