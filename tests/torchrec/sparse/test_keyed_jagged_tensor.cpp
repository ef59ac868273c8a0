// KeyedJaggedTensor: construction from lengths / offsets, lazy derivation, validation, access by
// key, split / permute / concat, variable stride per key.
#include <ferry/collectives/torchrec/torchrec.h>
#include "tests/torchrec/jagged_test_util.h"

#include <catch2/catch.hpp>

#include <thread>

using namespace ferry;
using namespace ferry::torchrec;
using namespace ferry::torchrec::testing;
using Catch::Matchers::Contains;

namespace {

//              sample 0   sample 1   sample 2
//     "f0"     [10, 11]   []         [12]
//     "f1"     [20]       [21]       [22, 23, 24]
const V kLengths{2, 0, 1, 1, 1, 3};
const V kOffsets{0, 2, 2, 3, 4, 5, 8};
const V kValues{10, 11, 12, 20, 21, 22, 23, 24};

KeyedJaggedTensor example(bool weighted = false) {
  Tensor w = weighted ? f32({0.5f, 1, 2, 3, 4, 5, 6, 7}) : Tensor();
  return KeyedJaggedTensor::from_lengths_sync({"f0", "f1"}, i64(kValues), i64(kLengths), w);
}

// keys a, b, c; stride 2: a [1], [2, 3]; b [], [4]; c [5, 6, 7], []
KeyedJaggedTensor three_keys() {
  return KeyedJaggedTensor::from_lengths_sync({"a", "b", "c"}, i64({1, 2, 3, 4, 5, 6, 7}),
                                              i64({1, 2, 0, 1, 3, 0}),
                                              f32({.1f, .2f, .3f, .4f, .5f, .6f, .7f}));
}

void check_same(const KeyedJaggedTensor& a, const KeyedJaggedTensor& b) {
  CHECK(a.keys() == b.keys());
  CHECK(iv(a.lengths()) == iv(b.lengths()));
  CHECK(iv(a.values()) == iv(b.values()));
  CHECK(a.stride() == b.stride());
  CHECK(a.stride_per_key_per_rank() == b.stride_per_key_per_rank());
  CHECK(a.has_weights() == b.has_weights());
  if (a.has_weights() && b.has_weights()) CHECK(dv(a.weights()) == dv(b.weights()));
}

}  // namespace

TEST_CASE("KJT: from_lengths_sync and from_offsets_sync agree", "[kjt]") {
  KeyedJaggedTensor a = example();
  KeyedJaggedTensor b = KeyedJaggedTensor::from_offsets_sync({"f0", "f1"}, i64(kValues), i64(kOffsets));
  for (const KeyedJaggedTensor* k : {&a, &b}) {
    CHECK(iv(k->lengths()) == kLengths);
    CHECK(iv(k->offsets()) == kOffsets);
    CHECK(iv(k->values()) == kValues);
    CHECK(k->stride() == 3);
    CHECK(k->stride_per_key() == V{3, 3});
    CHECK(k->stride_per_key_per_rank() == std::vector<V>{{3}, {3}});
    CHECK_FALSE(k->variable_stride_per_key());
    CHECK(k->length_per_key() == V{3, 5});
    CHECK(k->offset_per_key() == V{0, 3, 8});
    CHECK(k->lengths_offset_per_key() == V{0, 3, 6});
    CHECK(k->index_per_key() == std::map<std::string, int64_t>{{"f0", 0}, {"f1", 1}});
    CHECK(k->key_index("f1") == 1);
  }
  // int32 lengths keep their dtype in the derived offsets, and the reverse
  KeyedJaggedTensor c({.keys = {"f0", "f1"}, .values = i64(kValues),
                       .lengths = i32({2, 0, 1, 1, 1, 3})});
  CHECK(c.offsets().dtype() == DType::Int32);
  CHECK(iv(c.offsets()) == kOffsets);
  KeyedJaggedTensor d({.keys = {"f0", "f1"}, .values = i64(kValues),
                       .offsets = i32({0, 2, 2, 3, 4, 5, 8})});
  CHECK(d.lengths().dtype() == DType::Int32);
  CHECK(iv(d.lengths()) == kLengths);
  CHECK(d.length_per_key() == V{3, 5});  // from the offsets
  // both given and consistent; explicit stride
  KeyedJaggedTensor e({.keys = {"f0", "f1"}, .values = i64(kValues), .lengths = i64(kLengths),
                       .offsets = i64(kOffsets), .stride = 3});
  CHECK(e.length_per_key() == V{3, 5});
}

TEST_CASE("KJT: lazily derived lengths / offsets are computed once and shared", "[kjt]") {
  KeyedJaggedTensor a({.keys = {"f0", "f1"}, .values = i64(kValues), .lengths = i64(kLengths)});
  KeyedJaggedTensor copy = a;
  Tensor o1 = a.offsets();
  Tensor o2 = a.offsets();
  Tensor o3 = copy.offsets();
  CHECK(o1.shares_storage_with(o2));
  CHECK(o1.shares_storage_with(o3));
  CHECK(a.lengths().shares_storage_with(a.lengths()));  // the given one
  CHECK(a.length_per_key() == V{3, 5});

  // many threads asking at once all get the one cached tensor
  KeyedJaggedTensor b({.keys = {"f0", "f1"}, .values = i64(kValues), .offsets = i64(kOffsets)});
  std::vector<Tensor> got(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) threads.emplace_back([&, i] { got[i] = b.lengths(); });
  for (auto& t : threads) t.join();
  for (int i = 1; i < 4; ++i) CHECK(got[i].shares_storage_with(got[0]));
  CHECK(iv(got[0]) == kLengths);
}

TEST_CASE("KJT: validation names the method and the offending values", "[kjt][validation]") {
  auto from_lengths = [](std::vector<std::string> keys, V values, Tensor lengths, Tensor w = {},
                         std::optional<int64_t> stride = std::nullopt) {
    return KeyedJaggedTensor::from_lengths_sync(std::move(keys), i64(values), lengths, w, stride);
  };
  CHECK_THROWS_WITH(from_lengths({"f0", "f1"}, kValues, i64({2, 0, 1, 1, 1, 2})),
                    Contains("KeyedJaggedTensor::from_lengths_sync: lengths [2, 0, 1, 1, 1, 2] "
                             "sum to 7 but values has 8 elements"));
  CHECK_THROWS_WITH(from_lengths({"f0", "f1"}, kValues, i64({2, 0, 1, -1, 3, 3})),
                    Contains("lengths[3] = -1 is negative (key \"f1\", sample 0)"));
  CHECK_THROWS_WITH(from_lengths({"f0", "f1"}, kValues, i64(kLengths), f32({1, 2, 3, 4, 5, 6, 7})),
                    Contains("weights has 7 elements but values has 8"));
  CHECK_THROWS_WITH(from_lengths({"f0", "f1"}, kValues, i64(kLengths), i64(kValues)),
                    Contains("weights must be float32 or float64, got int64"));
  CHECK_THROWS_WITH(from_lengths({"f0", "f0"}, kValues, i64(kLengths)),
                    Contains("key \"f0\" appears twice (positions 0 and 1)"));
  CHECK_THROWS_WITH(from_lengths({"f0", "f1"}, kValues, i64(kLengths), {}, 4),
                    Contains("6 lengths given but 2 keys with stride 4 need 8"));
  CHECK_THROWS_WITH(from_lengths({"f0", "f1"}, {10, 11, 12, 20, 21, 22, 23},
                                 i64({2, 0, 1, 1, 3})),
                    Contains("5 lengths are not a multiple of the 2 keys"));
  CHECK_THROWS_WITH(from_lengths({"f0", "f1"}, kValues, f32({2, 0, 1, 1, 1, 3})),
                    Contains("lengths must be int32 or int64, got float32"));
  CHECK_THROWS_WITH(KeyedJaggedTensor::from_lengths_sync({"f0", "f1"}, i32({10, 11, 12, 20, 21, 22, 23, 24}),
                                                         i64(kLengths)),
                    Contains("values (ids) must be int64, got int32"));
  CHECK_THROWS_WITH(KeyedJaggedTensor::from_lengths_sync({"f0", "f1"}, i64(kValues), i64(kLengths), {},
                                                         std::nullopt, std::vector<V>{{2}, {3}}),
                    Contains("6 lengths given but 2 keys with strides per key [2, 3] need 5"));
  CHECK_THROWS_WITH(KeyedJaggedTensor::from_lengths_sync({"f0", "f1"}, i64(kValues), i64(kLengths), {},
                                                         std::nullopt, std::vector<V>{{2, -1}, {5}}),
                    Contains("stride_per_key_per_rank of key \"f0\" has a negative stride: [2, -1]"));
  CHECK_THROWS_WITH(KeyedJaggedTensor::from_lengths_sync({"f0", "f1"}, i64(kValues), i64(kLengths), {},
                                                         std::nullopt, std::vector<V>{{6}}),
                    Contains("stride_per_key_per_rank has 1 entries for 2 keys"));
  // offsets
  auto from_offsets = [](V offsets) {
    return KeyedJaggedTensor::from_offsets_sync({"f0", "f1"}, i64(kValues), i64(offsets));
  };
  CHECK_THROWS_WITH(from_offsets({1, 2, 2, 3, 4, 5, 8}),
                    Contains("KeyedJaggedTensor::from_offsets_sync: offsets must start with 0"));
  CHECK_THROWS_WITH(from_offsets({0, 2, 1, 3, 4, 5, 8}), Contains("offsets decrease at 2 (2 -> 1)"));
  CHECK_THROWS_WITH(from_offsets({0, 2, 2, 3, 4, 5, 7}),
                    Contains("offsets end at 7 but values has 8 elements"));
  CHECK_THROWS_WITH(KeyedJaggedTensor({.keys = {"f0", "f1"}, .values = i64(kValues),
                                       .lengths = i64({2, 0, 1, 1, 2, 2}), .offsets = i64(kOffsets)}),
                    Contains("KeyedJaggedTensor: lengths[4] = 2 disagrees with offsets 4 -> 5"));
  CHECK_THROWS_WITH(KeyedJaggedTensor({.keys = {"f0"}, .values = i64(kValues)}),
                    Contains("give lengths or offsets"));
}

TEST_CASE("KJT: access by key and to_dict", "[kjt]") {
  KeyedJaggedTensor kjt = example(true);
  JaggedTensor f1 = kjt["f1"];
  CHECK(iv(f1.values()) == V{20, 21, 22, 23, 24});
  CHECK(iv(f1.lengths()) == V{1, 1, 3});
  CHECK(iv(f1.offsets()) == V{0, 1, 2, 5});
  CHECK(dv(f1.weights()) == std::vector<double>{3, 4, 5, 6, 7});
  CHECK(f1.values().shares_storage_with(kjt.values()));
  CHECK(iv(f1.to_dense()[2]) == V{22, 23, 24});

  auto d = kjt.to_dict();
  REQUIRE(d.size() == 2);
  CHECK(iv(d.at("f0").values()) == V{10, 11, 12});
  CHECK(iv(d.at("f0").lengths()) == V{2, 0, 1});
  CHECK(dv(d.at("f0").weights()) == std::vector<double>{0.5, 1, 2});
  CHECK(iv(d.at("f1").lengths()) == V{1, 1, 3});
  CHECK_THROWS_WITH(kjt["f9"], Contains("no key \"f9\" in keys [\"f0\", \"f1\"]"));
  CHECK_THROWS_WITH(example().weights(), Contains("has no weights"));
}

TEST_CASE("KJT: split / permute / concat round trips", "[kjt]") {
  KeyedJaggedTensor kjt = three_keys();
  std::vector<KeyedJaggedTensor> parts = kjt.split({1, 0, 2});
  REQUIRE(parts.size() == 3);
  CHECK(parts[0].keys() == std::vector<std::string>{"a"});
  CHECK(iv(parts[0].values()) == V{1, 2, 3});
  CHECK(iv(parts[0].lengths()) == V{1, 2});
  CHECK(parts[1].num_keys() == 0);
  CHECK(parts[1].values().numel() == 0);
  CHECK(parts[1].stride() == 2);
  CHECK(parts[2].keys() == std::vector<std::string>{"b", "c"});
  CHECK(iv(parts[2].values()) == V{4, 5, 6, 7});
  CHECK(iv(parts[2].lengths()) == V{0, 1, 3, 0});
  CHECK(dv(parts[2].weights()) == dv(f32({.4f, .5f, .6f, .7f})));
  CHECK(parts[2].values().shares_storage_with(kjt.values()));
  check_same(KeyedJaggedTensor::concat(parts), kjt);

  KeyedJaggedTensor p = kjt.permute({2, 0, 1});
  CHECK(p.keys() == std::vector<std::string>{"c", "a", "b"});
  CHECK(iv(p.lengths()) == V{3, 0, 1, 2, 0, 1});
  CHECK(iv(p.values()) == V{5, 6, 7, 1, 2, 3, 4});
  CHECK(dv(p.weights()) == dv(f32({.5f, .6f, .7f, .1f, .2f, .3f, .4f})));
  CHECK(iv(p["a"].values()) == V{1, 2, 3});
  check_same(p.permute({1, 2, 0}), kjt);  // the inverse permutation

  // repeated keys (column-wise shards of one table) are allowed by permute
  KeyedJaggedTensor dup = kjt.permute({0, 0, 2});
  CHECK(dup.allows_duplicate_keys());
  CHECK(dup.keys() == std::vector<std::string>{"a", "a", "c"});
  CHECK(iv(dup.values()) == V{1, 2, 3, 1, 2, 3, 5, 6, 7});
  CHECK_THROWS_WITH(dup["a"], Contains("key \"a\" repeats"));
  CHECK_THROWS_WITH(dup.to_dict(), Contains("access by key is ambiguous"));
  CHECK(iv(dup["c"].values()) == V{5, 6, 7});
  CHECK(kjt.permute({}).num_keys() == 0);

  CHECK_THROWS_WITH(kjt.permute({0, 3}), Contains("KeyedJaggedTensor::permute: index 3 at position 1 "
                                                 "is out of range for 3 keys"));
  CHECK_THROWS_WITH(kjt.split({1, 1}), Contains("KeyedJaggedTensor::split: segments [1, 1] sum to 2 "
                                               "but there are 3 keys"));
  CHECK_THROWS_WITH(kjt.split({4, -1}), Contains("contain a negative size"));
}

TEST_CASE("KJT: concat checks weights, strides and keys", "[kjt]") {
  KeyedJaggedTensor x = KeyedJaggedTensor::from_lengths_sync({"x"}, i64({1, 2}), i64({2, 0}));
  KeyedJaggedTensor y = KeyedJaggedTensor::from_lengths_sync({"y"}, i64({3}), i64({0, 1}));
  KeyedJaggedTensor xy = KeyedJaggedTensor::concat({x, KeyedJaggedTensor::empty(), y});
  CHECK(xy.keys() == std::vector<std::string>{"x", "y"});
  CHECK(iv(xy.lengths()) == V{2, 0, 0, 1});
  CHECK(iv(xy.values()) == V{1, 2, 3});
  CHECK(xy.stride() == 2);

  KeyedJaggedTensor z3 = KeyedJaggedTensor::from_lengths_sync({"z"}, i64({3}), i64({0, 1, 0}));
  CHECK_THROWS_WITH(KeyedJaggedTensor::concat({x, z3}), Contains("KJT 1 has stride 3 but an earlier one has 2"));
  CHECK_THROWS_WITH(KeyedJaggedTensor::concat({x, x}), Contains("key \"x\" appears twice"));
  KeyedJaggedTensor wy = KeyedJaggedTensor::from_lengths_sync({"y"}, i64({3}), i64({0, 1}), f32({1}));
  CHECK_THROWS_WITH(KeyedJaggedTensor::concat({x, wy}), Contains("KJT 1 is weighted but KJT 0 is unweighted"));
  KeyedJaggedTensor y32 = KeyedJaggedTensor::from_lengths_sync({"y"}, i64({3}), i32({0, 1}));
  CHECK_THROWS_WITH(KeyedJaggedTensor::concat({x, y32}), Contains("KJT 1 has int32 lengths but KJT 0 has int64"));
  CHECK(KeyedJaggedTensor::concat({}).num_keys() == 0);
}

TEST_CASE("KJT: variable stride per key", "[kjt][vbe]") {
  // f0: 2 samples (1 from rank 0, 1 from rank 1): [1], [2, 3]
  // f1: 3 samples (2 from rank 0, 1 from rank 1): [], [4], [5, 6, 7]
  KeyedJaggedTensor kjt = KeyedJaggedTensor::from_lengths_sync(
      {"f0", "f1"}, i64({1, 2, 3, 4, 5, 6, 7}), i64({1, 2, 0, 1, 3}), {}, std::nullopt,
      std::vector<V>{{1, 1}, {2, 1}});
  CHECK(kjt.variable_stride_per_key());
  CHECK(kjt.stride() == 3);
  CHECK(kjt.stride_per_key() == V{2, 3});
  CHECK(kjt.stride_per_key_per_rank() == std::vector<V>{{1, 1}, {2, 1}});
  CHECK(kjt.lengths_offset_per_key() == V{0, 2, 5});
  CHECK(kjt.length_per_key() == V{3, 4});
  CHECK(iv(kjt["f1"].lengths()) == V{0, 1, 3});
  CHECK(iv(kjt["f1"].values()) == V{4, 5, 6, 7});
  CHECK(iv(kjt["f0"].lengths()) == V{1, 2});

  KeyedJaggedTensor p = kjt.permute({1, 0});
  CHECK(iv(p.lengths()) == V{0, 1, 3, 1, 2});
  CHECK(iv(p.values()) == V{4, 5, 6, 7, 1, 2, 3});
  CHECK(p.stride_per_key_per_rank() == std::vector<V>{{2, 1}, {1, 1}});
  std::vector<KeyedJaggedTensor> parts = kjt.split({1, 1});
  CHECK(parts[1].stride_per_key() == V{3});
  CHECK(iv(parts[1].lengths()) == V{0, 1, 3});
  check_same(KeyedJaggedTensor::concat(parts), kjt);

  // concat with a fixed-stride KJT gives a variable one
  KeyedJaggedTensor g = KeyedJaggedTensor::from_lengths_sync({"g"}, i64({9}), i64({1, 0, 0, 0}));
  KeyedJaggedTensor c = KeyedJaggedTensor::concat({kjt, g});
  CHECK(c.variable_stride_per_key());
  CHECK(c.stride_per_key() == V{2, 3, 4});
  CHECK(c.stride() == 4);
  CHECK(iv(c["g"].lengths()) == V{1, 0, 0, 0});

  // inverse indices are carried through split and permute
  InverseIndices inv{{"f0", "f1"}, from_vector<int64_t>({0, 1, 1, 0, 1, 2}, {2, 3})};
  KeyedJaggedTensor with_inv = KeyedJaggedTensor::from_lengths_sync(
      {"f0", "f1"}, i64({1, 2, 3, 4, 5, 6, 7}), i64({1, 2, 0, 1, 3}), {}, std::nullopt,
      std::vector<V>{{1, 1}, {2, 1}}, inv);
  REQUIRE(with_inv.permute({1}).inverse_indices().has_value());
  CHECK(iv(with_inv.permute({1}).inverse_indices()->indices) == V{0, 1, 1, 0, 1, 2});
  CHECK_THROWS_WITH(KeyedJaggedTensor::from_lengths_sync(
                        {"f0", "f1"}, i64({1, 2, 3, 4, 5, 6, 7}), i64({1, 2, 0, 1, 3}), {},
                        std::nullopt, std::vector<V>{{1, 1}, {2, 1}},
                        InverseIndices{{"f0"}, from_vector<int64_t>({0, 1, 1, 0, 1, 2}, {2, 3})}),
                    Contains("inverse_indices has 2 rows for 1 keys"));
}

TEST_CASE("KJT: empty", "[kjt]") {
  KeyedJaggedTensor e = KeyedJaggedTensor::empty(true, DType::Float64, DType::Int32);
  CHECK(e.num_keys() == 0);
  CHECK(e.stride() == 0);
  CHECK(e.lengths().numel() == 0);
  CHECK(iv(e.offsets()) == V{0});
  CHECK(e.weights().dtype() == DType::Float64);
  CHECK(e.length_per_key().empty());
  CHECK(e.offset_per_key() == V{0});
  CHECK(KeyedJaggedTensor().num_keys() == 0);
  CHECK(e.to_dict().empty());
}

TEST_CASE("KJT: built from lengths its caller checked", "[kjt]") {
  // kLengths per key: f0 3 values, f1 5.
  const KeyedJaggedTensor kjt = torchrec::detail::kjt_with_checked_lengths(
      {.keys = {"f0", "f1"}, .values = i64(kValues), .lengths = i64(kLengths)}, {3, 5}, "test");
  CHECK(kjt.length_per_key() == V{3, 5});
  CHECK(iv(kjt.offsets()) == kOffsets);
  check_same(kjt, example());
  // The counts must still fit the keys and the values; the rest is validated as usual.
  CHECK_THROWS_WITH(torchrec::detail::kjt_with_checked_lengths(
                        {.keys = {"f0", "f1"}, .values = i64(kValues), .lengths = i64(kLengths)},
                        {3, 4}, "test"),
                    Contains("test") && Contains("sum 7") && Contains("8 values"));
  CHECK_THROWS_WITH(torchrec::detail::kjt_with_checked_lengths(
                        {.keys = {"f0", "f1"}, .values = i64(kValues), .lengths = i64(kLengths)},
                        {8}, "test"),
                    Contains("2 keys"));
  CHECK_THROWS_AS(torchrec::detail::kjt_with_checked_lengths(
                      {.keys = {"f0", "f0"}, .values = i64(kValues), .lengths = i64(kLengths)},
                      {3, 5}, "test"),
                  InvalidArgument);
}
