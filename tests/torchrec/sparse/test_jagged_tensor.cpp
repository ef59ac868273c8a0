// JaggedTensor: lengths / offsets agreement, dense views and padding, validation messages.
#include <ferry/collectives/torchrec/torchrec.h>
#include "tests/torchrec/jagged_test_util.h"

#include <catch2/catch.hpp>

using namespace ferry;
using namespace ferry::torchrec;
using namespace ferry::torchrec::testing;
using Catch::Matchers::Contains;

TEST_CASE("JaggedTensor: from lengths and from offsets agree", "[jagged]") {
  // rows [10, 11], [], [12], [13]
  JaggedTensor a = JaggedTensor::from_lengths(i64({10, 11, 12, 13}), i64({2, 0, 1, 1}));
  JaggedTensor b = JaggedTensor::from_offsets(i64({10, 11, 12, 13}), i64({0, 2, 2, 3, 4}));
  CHECK(iv(a.offsets()) == V{0, 2, 2, 3, 4});
  CHECK(iv(b.lengths()) == V{2, 0, 1, 1});
  CHECK(equal(a.lengths(), b.lengths()));
  CHECK(equal(a.offsets(), b.offsets()));
  CHECK(a.num_rows() == 4);
  CHECK(a.num_values() == 4);
  CHECK_FALSE(a.has_weights());
  // both given and consistent
  JaggedTensor c(i64({10, 11, 12, 13}), i64({2, 0, 1, 1}), i64({0, 2, 2, 3, 4}));
  CHECK(iv(c.lengths()) == V{2, 0, 1, 1});
  // int32 lengths give int32 offsets
  JaggedTensor d = JaggedTensor::from_lengths(i64({1, 2, 3}), i32({1, 2}));
  CHECK(d.offsets().dtype() == DType::Int32);
  CHECK(iv(d.offsets()) == V{0, 1, 3});
}

TEST_CASE("JaggedTensor: rows, to_dense, to_padded_dense", "[jagged]") {
  JaggedTensor jt = JaggedTensor::from_lengths(i64({10, 11, 12, 13, 14, 15}), i64({2, 0, 1, 3}),
                                               f32({0.5f, 1, 2, 3, 4, 5}));
  std::vector<Tensor> rows = jt.to_dense();
  REQUIRE(rows.size() == 4);
  CHECK(iv(rows[0]) == V{10, 11});
  CHECK(rows[1].numel() == 0);
  CHECK(iv(rows[2]) == V{12});
  CHECK(iv(rows[3]) == V{13, 14, 15});
  CHECK(rows[3].shares_storage_with(jt.values()));
  CHECK(iv(jt.row(3)) == V{13, 14, 15});
  CHECK(dv(jt.to_dense_weights()[0]) == std::vector<double>{0.5, 1});

  Tensor p = jt.to_padded_dense();
  CHECK(p.shape() == Shape{4, 3});
  CHECK(iv(p) == V{10, 11, 0, 0, 0, 0, 12, 0, 0, 13, 14, 15});
  Tensor q = jt.to_padded_dense(2, -1);
  CHECK(q.shape() == Shape{4, 2});
  CHECK(iv(q) == V{10, 11, -1, -1, 12, -1, 13, 14});
  Tensor w = jt.to_padded_dense_weights(1);
  CHECK(dv(w) == std::vector<double>{0.5, 0, 2, 3});
  CHECK_THROWS_WITH(jt.row(4), Contains("index 4 is out of range for 4 rows"));
}

TEST_CASE("JaggedTensor: 2-D values (rows of embeddings), from_dense, empty", "[jagged]") {
  Tensor values = from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2});
  JaggedTensor jt = JaggedTensor::from_lengths(values, i64({1, 3}));
  CHECK(jt.row(1).shape() == Shape{3, 2});
  CHECK(dv(jt.row(1)) == std::vector<double>{3, 4, 5, 6, 7, 8});
  CHECK_THROWS_WITH(jt.to_padded_dense(), Contains("needs 1-D values"));

  JaggedTensor d = JaggedTensor::from_dense({i64({1, 2}), i64({}), i64({3})},
                                            {f32({.5f, .25f}), f32({}), f32({2})});
  CHECK(iv(d.values()) == V{1, 2, 3});
  CHECK(iv(d.lengths()) == V{2, 0, 1});
  CHECK(dv(d.weights()) == std::vector<double>{.5, .25, 2});

  JaggedTensor e = JaggedTensor::empty(true);
  CHECK(e.num_rows() == 0);
  CHECK(iv(e.offsets()) == V{0});
  CHECK(e.has_weights());
  CHECK_THROWS_WITH(JaggedTensor().weights(), Contains("has no weights"));
}

TEST_CASE("JaggedTensor: validation names the offending value", "[jagged][validation]") {
  const Tensor v = i64({10, 11, 12, 13});
  CHECK_THROWS_WITH(JaggedTensor::from_lengths(v, i64({2, -1, 2, 1})),
                    Contains("JaggedTensor: lengths[1] = -1 is negative"));
  CHECK_THROWS_WITH(JaggedTensor::from_lengths(v, i64({2, 0, 1})),
                    Contains("sum to 3 but values has 4 rows"));
  CHECK_THROWS_WITH(JaggedTensor::from_offsets(v, i64({1, 2, 4})),
                    Contains("offsets must start with 0, got [1, 2, 4]"));
  CHECK_THROWS_WITH(JaggedTensor::from_offsets(v, i64({0, 3, 2, 4})),
                    Contains("offsets decrease at 2 (3 -> 2)"));
  CHECK_THROWS_WITH(JaggedTensor::from_offsets(v, i64({0, 2, 3})),
                    Contains("offsets end at 3 but values has 4 rows"));
  CHECK_THROWS_WITH(JaggedTensor(v, i64({2, 2}), i64({0, 1, 4})),
                    Contains("lengths[0] = 2 disagrees with offsets 0 -> 1"));
  CHECK_THROWS_WITH(JaggedTensor::from_lengths(v, i64({4}), f32({1, 2, 3})),
                    Contains("weights has 3 elements but there are 4 values"));
  CHECK_THROWS_WITH(JaggedTensor::from_lengths(v, i64({4}), i64({1, 2, 3, 4})),
                    Contains("weights must be float32 or float64, got int64"));
  CHECK_THROWS_WITH(JaggedTensor::from_lengths(v, f32({4})),
                    Contains("lengths must be int32 or int64, got float32"));
  CHECK_THROWS_WITH(JaggedTensor(v, Tensor(), Tensor()), Contains("give lengths or offsets"));
  CHECK_THROWS_AS(JaggedTensor::from_lengths(v, i64({5})), InvalidArgument);
}
