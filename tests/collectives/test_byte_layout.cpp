// copy_layout / pack_layout / unpack_layout against a byte-at-a-time reference, on seeded random
// layouts: scattered on both sides (the general walk), and with one side one contiguous span
// (the run-at-a-time path the column blocks of torchrec's pooled all-to-all take), with empty
// runs and runs of one piece mixed in.
#include <ferry/backends/byte_layout.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

using ferry::ByteLayout;
using ferry::ByteRun;

namespace {

// The layout's byte offsets, in the order it is read or written.
std::vector<size_t> offsets(const ByteLayout& l) {
  std::vector<size_t> out;
  for (const ByteRun& r : l.runs)
    for (size_t j = 0; j < r.count; ++j)
      for (size_t b = 0; b < r.block; ++b) out.push_back(r.offset + j * r.stride + b);
  return out;
}

// Random non-overlapping runs holding `bytes` bytes (the buffer needs `extent` bytes), in a
// shuffled order when `shuffle`; empty runs (no pieces, or empty pieces) sprinkled in.
ByteLayout random_layout(std::mt19937& rng, size_t bytes, bool shuffle, size_t& extent) {
  std::vector<ByteRun> runs;
  size_t left = bytes, at = 0;
  while (left > 0) {
    if (rng() % 5 == 0) runs.push_back(rng() % 2 ? ByteRun{at, 0, 4, 4} : ByteRun{at, 3, 0, 4});
    const size_t block = 1 + rng() % std::min<size_t>(left, 40);
    const size_t count = std::max<size_t>(1, std::min<size_t>(left / block, 1 + rng() % 6));
    const size_t stride = block + (rng() % 3 == 0 ? 0 : rng() % 9);
    runs.push_back(ByteRun{at, count, block, stride});
    left -= count * block;
    at += (count - 1) * stride + block + rng() % 5;
  }
  if (shuffle) std::shuffle(runs.begin(), runs.end(), rng);
  extent = at + 1;
  return ByteLayout{nullptr, runs};
}

}  // namespace

TEST_CASE("byte layouts copy, pack and unpack every byte in order", "[byte_layout]") {
  for (uint32_t seed = 0; seed < 300; ++seed) {
    std::mt19937 rng(seed);
    const size_t bytes = rng() % 700;
    size_t src_extent = 0, dst_extent = 0;
    ByteLayout from, to;
    const int shape = seed % 3;  // 0: both scattered; 1: source one span; 2: destination one span
    if (shape == 1) {
      from.runs = {ByteRun{3, 1, bytes, 0}};
      src_extent = bytes + 3;
    } else {
      from = random_layout(rng, bytes, seed % 2 == 0, src_extent);
    }
    if (shape == 2) {
      // An empty run, then one span: as 4 abutting pieces when they divide it.
      const bool quarters = bytes > 0 && bytes % 4 == 0;
      to.runs = {ByteRun{0, 1, 0, 0}, quarters ? ByteRun{5, 4, bytes / 4, bytes / 4}
                                               : ByteRun{5, 1, bytes, 0}};
      dst_extent = bytes + 6;
    } else {
      to = random_layout(rng, bytes, seed % 4 == 1, dst_extent);
    }
    REQUIRE(from.bytes() == bytes);
    REQUIRE(to.bytes() == bytes);
    std::vector<char> src(src_extent), dst(dst_extent, 0), want(dst_extent, 0);
    for (char& c : src) c = static_cast<char>(1 + rng() % 250);
    from.base = src.data();
    to.base = dst.data();
    const std::vector<size_t> so = offsets(from), d_o = offsets(to);
    for (size_t i = 0; i < so.size(); ++i) want[d_o[i]] = src[so[i]];

    ferry::copy_layout(from, to);
    INFO("seed " << seed << ", shape " << shape << ", " << bytes << " bytes");
    CHECK(dst == want);

    std::vector<char> packed(bytes), want_packed(bytes);
    for (size_t i = 0; i < so.size(); ++i) want_packed[i] = src[so[i]];
    ferry::pack_layout(from, packed.data());
    CHECK(packed == want_packed);

    std::vector<char> unpacked(dst_extent, 0), want_unpacked(dst_extent, 0);
    for (size_t i = 0; i < d_o.size(); ++i) want_unpacked[d_o[i]] = packed[i];
    to.base = unpacked.data();
    ferry::unpack_layout(packed.data(), to);
    CHECK(unpacked == want_unpacked);
  }
}

TEST_CASE("strided pieces of every length copy to and from one span", "[byte_layout]") {
  // Short pieces are copied inline and last first, middling ones by memcpy last first, long
  // ones first first (byte_layout.cpp): each length on each side of those bounds, both ways.
  for (size_t block : {1, 16, 31, 32, 33, 64, 100, 127, 128, 200, 256, 257, 1000}) {
    for (size_t count : {1, 2, 7}) {
      const size_t stride = block * 2 + 3, bytes = block * count;
      std::vector<char> packed(bytes), strided((count - 1) * stride + block + 5, 0);
      for (size_t i = 0; i < bytes; ++i) packed[i] = static_cast<char>(1 + (i * 7 + block) % 250);
      const ByteLayout columns{strided.data(), {ByteRun{2, count, block, stride}}};
      std::vector<char> want(strided.size(), 0);
      for (size_t j = 0; j < count; ++j)
        std::copy_n(packed.data() + j * block, block, want.data() + 2 + j * stride);

      ferry::unpack_layout(packed.data(), columns);
      INFO(count << " pieces of " << block << " B");
      CHECK(strided == want);
      std::vector<char> back(bytes, 0);
      ferry::pack_layout(columns, back.data());
      CHECK(back == packed);
    }
  }
}
