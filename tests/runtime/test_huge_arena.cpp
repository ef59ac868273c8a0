// The huge page arena (runtime/huge_arena.h): blocks of 128 KiB up to 2 MiB carved from regions
// in huge pages, given back and carved again, their pages handed back to the system, from
// several threads at once; and the block cache taking them from there.
#include <ferry/runtime/block_cache.h>
#include <ferry/runtime/config.h>
#include <ferry/runtime/huge_arena.h>
#include <ferry/runtime/tensor.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

using namespace ferry;
using detail::acquire_huge_arena_block;
using detail::release_huge_arena_block;

namespace {

struct Block {
  unsigned char* p;
  size_t bytes;
};

// Whether any page of [p, p + bytes) is resident (mincore).
bool any_page_resident(const void* p, size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident((bytes + page - 1) / page);
  REQUIRE(mincore(const_cast<void*>(p), bytes, resident.data()) == 0);
  return std::any_of(resident.begin(), resident.end(), [](unsigned char r) { return r & 1; });
}

}  // namespace

TEST_CASE("huge arena blocks are page-aligned, apart, and carved again once given back",
          "[huge_arena]") {
  const size_t in_use = detail::huge_arena_bytes_in_use();
  std::vector<Block> blocks;
  size_t asked = 0;
  for (size_t kib : {128, 132, 512, 1000, 1024, 2044}) {
    for (int copy = 0; copy < 3; ++copy) {
      const size_t bytes = kib << 10;
      auto* p = static_cast<unsigned char*>(acquire_huge_arena_block(bytes));
      CHECK(reinterpret_cast<uintptr_t>(p) % 4096 == 0);
      std::memset(p, static_cast<int>(blocks.size() + 1), bytes);
      blocks.push_back({p, bytes});
      asked += bytes;
    }
  }
  CHECK(detail::huge_arena_bytes_in_use() == in_use + asked);
  // Every block still holds its own pattern: none overlaps another.
  for (size_t i = 0; i < blocks.size(); ++i) {
    const auto want = static_cast<unsigned char>(i + 1);
    INFO("block " << i << " of " << blocks[i].bytes << " B");
    CHECK(std::all_of(blocks[i].p, blocks[i].p + blocks[i].bytes,
                      [&](unsigned char c) { return c == want; }));
  }
  const size_t mapped = detail::huge_arena_region_bytes();
  for (const Block& b : blocks) release_huge_arena_block(b.p, b.bytes);
  CHECK(detail::huge_arena_bytes_in_use() == in_use);
  // The freed ranges merge again: the same blocks once more fit in the regions already mapped.
  for (Block& b : blocks) b.p = static_cast<unsigned char*>(acquire_huge_arena_block(b.bytes));
  CHECK(detail::huge_arena_region_bytes() == mapped);
  for (const Block& b : blocks) release_huge_arena_block(b.p, b.bytes);
}

TEST_CASE("the huge arena hands the pages of its free ranges back", "[huge_arena]") {
  const size_t bytes = size_t{1} << 20;
  auto* p = static_cast<unsigned char*>(acquire_huge_arena_block(bytes));
  std::memset(p, 7, bytes);
  CHECK(any_page_resident(p, bytes));
  release_huge_arena_block(p, bytes);
  CHECK(detail::release_free_huge_arena_pages() >= bytes);
  CHECK_FALSE(any_page_resident(p, bytes));
  // A block carved there again reads zeros: fresh pages, as from the system.
  auto* again = static_cast<unsigned char*>(acquire_huge_arena_block(bytes));
  CHECK(std::all_of(again, again + bytes, [](unsigned char c) { return c == 0; }));
  release_huge_arena_block(again, bytes);
}

TEST_CASE("past its bound of free bytes the huge arena gives freed huge pages back",
          "[huge_arena]") {
  // Blocks of 2 MiB less a page, more than kMaxHugeArenaFree of them: once the free ranges
  // pass the bound, a freed block's whole huge pages go back as it is freed.
  const size_t bytes = detail::kHugePageBytes - 4096;
  const size_t count = detail::kMaxHugeArenaFree / bytes + 8;
  std::vector<unsigned char*> blocks;
  for (size_t i = 0; i < count; ++i) {
    blocks.push_back(static_cast<unsigned char*>(acquire_huge_arena_block(bytes)));
    std::memset(blocks.back(), 1, bytes);
  }
  for (unsigned char* p : blocks) release_huge_arena_block(p, bytes);
  // The last blocks freed went beyond the bound: their huge pages, merged with their free
  // neighbours, are no longer resident.
  size_t gone = 0;
  for (size_t i = count - 4; i < count; ++i) gone += any_page_resident(blocks[i], bytes) ? 0 : 1;
  CHECK(gone > 0);
}

TEST_CASE("huge arena blocks taken and given back by several threads at once", "[huge_arena]") {
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &wrong] {
      std::mt19937 rng(static_cast<uint32_t>(t));
      std::vector<Block> mine;
      for (int i = 0; i < 300; ++i) {
        if (mine.size() < 6 && rng() % 3 != 0) {
          const size_t bytes = (128 + rng() % 1900) << 10;
          auto* p = static_cast<unsigned char*>(acquire_huge_arena_block(bytes));
          std::memset(p, t + 1, bytes);
          mine.push_back({p, bytes});
        } else if (!mine.empty()) {
          const Block b = mine.back();
          mine.pop_back();
          if (!std::all_of(b.p, b.p + b.bytes, [&](unsigned char c) { return c == t + 1; }))
            ++wrong[t];
          release_huge_arena_block(b.p, b.bytes);
        }
      }
      for (const Block& b : mine) release_huge_arena_block(b.p, b.bytes);
    });
  }
  for (std::thread& t : threads) t.join();
  CHECK(wrong == std::vector<int>(4, 0));
}

TEST_CASE("the block cache takes blocks of 128 KiB up to 2 MiB from the huge arena",
          "[huge_arena][block_cache]") {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  REQUIRE(config().huge_pages);  // the suite does not set FERRY_HUGE_PAGES
  release_cached_blocks();
  for (const int64_t kib : {128, 640, 1024, 1792}) {  // 1792 KiB: the last class below 2 MiB
    const size_t before = detail::huge_arena_bytes_in_use();
    Tensor t = empty({kib << 10}, DType::UInt8);
    INFO(kib << " KiB");
    CHECK(detail::huge_arena_bytes_in_use() > before);
  }
  // Smaller and larger blocks come from elsewhere.
  for (const int64_t kib : {64, 2048}) {
    const size_t before = detail::huge_arena_bytes_in_use();
    Tensor t = empty({kib << 10}, DType::UInt8);
    INFO(kib << " KiB");
    CHECK(detail::huge_arena_bytes_in_use() == before);
  }
  release_cached_blocks();
#endif
}
