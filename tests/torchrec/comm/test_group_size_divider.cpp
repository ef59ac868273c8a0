// GroupSizeDivider (comm_op_base.h): the gradient division by W, which multiplies by 1/W when W is
// a power of two, must give the bits x / W gives, for every kind of float.
#include <ferry/collectives/torchrec/comm/comm_op_base.h>

#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace {

template <typename T, typename Bits>
void check_bits_equal_division(int W) {
  std::mt19937_64 rng(static_cast<uint64_t>(W));
  std::vector<T> x;
  // Random bit patterns cover normals, subnormals, both zeros, infinities and NaNs; add the edges.
  for (int i = 0; i < 200000; ++i) x.push_back(std::bit_cast<T>(static_cast<Bits>(rng())));
  for (T v : {T{0}, -T{0}, std::numeric_limits<T>::denorm_min(), std::numeric_limits<T>::min(),
              std::numeric_limits<T>::max(), std::numeric_limits<T>::infinity(),
              -std::numeric_limits<T>::infinity(), std::numeric_limits<T>::quiet_NaN(), T{1},
              T{3}, T{1} / T{3}})
    x.push_back(v);
  std::vector<T> got(x.size());
  ferry::torchrec::detail::GroupSizeDivider<T>(W).apply(x.data(), got.data(),
                                                         static_cast<int64_t>(x.size()));
  int64_t differ = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const T want = x[i] / static_cast<T>(W);
    const bool same = std::isnan(want) ? std::isnan(got[i])
                                       : std::bit_cast<Bits>(want) == std::bit_cast<Bits>(got[i]);
    if (!same) ++differ;
  }
  INFO("W = " << W << ", " << x.size() << " values");
  CHECK(differ == 0);
}

}  // namespace

TEST_CASE("GroupSizeDivider: the same bits as x / W", "[comm_ops][division]") {
  for (int W : {1, 2, 3, 4, 5, 7, 8, 16, 64, 1024}) {
    check_bits_equal_division<float, uint32_t>(W);
    check_bits_equal_division<double, uint64_t>(W);
  }
}

TEST_CASE("GroupSizeDivider: in place", "[comm_ops][division]") {
  std::vector<float> x{1.0f, -6.0f, 0.75f};
  ferry::torchrec::detail::GroupSizeDivider<float>(4).apply(x.data(), x.data(), 3);
  CHECK(x == std::vector<float>{0.25f, -1.5f, 0.1875f});
}
