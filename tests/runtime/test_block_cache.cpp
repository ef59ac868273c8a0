// The block caches under tensor storage (runtime/block_cache.h), at their default limit
// (256 MiB; the suite does not set FERRY_HOST_CACHE_MB).
#include <ferry/runtime/block_cache.h>
#include <ferry/runtime/config.h>
#include <ferry/runtime/tensor.h>

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

using namespace ferry;

TEST_CASE("a large block freed by one tensor is reused by the next of the same size",
          "[block_cache]") {
  release_cached_blocks();
  const void* first = nullptr;
  {
    Tensor t = empty({1 << 19}, DType::Float32);  // 2 MiB
    first = t.raw_data();
  }
  CHECK(cached_block_bytes() == size_t{2} << 20);
  Tensor again = empty({1 << 19}, DType::Float32);
  CHECK(again.raw_data() == first);
  CHECK(cached_block_bytes() == 0);
  // Small tensors never reach the cache.
  { Tensor small = empty({100}); }
  CHECK(cached_block_bytes() == 0);
}

TEST_CASE("a block serves every size of its class: eight classes per power of two",
          "[block_cache]") {
  release_cached_blocks();
  const void* first = nullptr;
  {
    Tensor t = empty({300000}, DType::UInt8);
    first = t.raw_data();
  }
  // 256 KiB <= n < 512 KiB: classes step by 32 KiB, so 300000 and 320000 bytes share one.
  CHECK(cached_block_bytes() == size_t{10} * (32 << 10));
  Tensor same_class = empty({320000}, DType::UInt8);
  CHECK(same_class.raw_data() == first);
  CHECK(cached_block_bytes() == 0);
  same_class = Tensor();
  Tensor next_class = empty({330000}, DType::UInt8);  // 327680 < 330000: the next class
  CHECK(next_class.raw_data() != first);
  release_cached_blocks();
}

TEST_CASE("the cache stays within its limit by dropping the oldest blocks", "[block_cache]") {
  release_cached_blocks();
  const int64_t hundred_mib = int64_t{100} << 20;
  {
    Tensor a = empty({hundred_mib}, DType::UInt8);
    Tensor b = empty({hundred_mib + 1}, DType::UInt8);
    Tensor c = empty({hundred_mib + 2}, DType::UInt8);
    a = Tensor();  // released first: the one to go when c arrives
    b = Tensor();
  }
  // Three blocks of the 104 MiB class (100 MiB rounded up to a multiple of 64 MiB / 8) released
  // into a 256 MiB cache: a was evicted, b and c are held.
  CHECK(cached_block_bytes() == size_t{2 * 104} << 20);
  release_cached_blocks();
  CHECK(cached_block_bytes() == 0);
}

TEST_CASE("a thread gets back the block it released itself before another thread's",
          "[block_cache]") {
  release_cached_blocks();
  Tensor a = empty({1 << 18}, DType::Float32);  // 1 MiB each
  Tensor b = empty({1 << 18}, DType::Float32);
  const void* mine = a.raw_data();
  const void* theirs = b.raw_data();
  a = Tensor();  // released by this thread first
  std::thread([t = std::move(b)]() mutable { t = Tensor(); }).join();  // then by another
  REQUIRE(mine != theirs);
  REQUIRE(cached_block_bytes() == size_t{2} << 20);
  Tensor again = empty({1 << 18}, DType::Float32);
  CHECK(again.raw_data() == mine);
  // With none of its own left, a thread takes the newest block there is.
  Tensor next = empty({1 << 18}, DType::Float32);
  CHECK(next.raw_data() == theirs);
  CHECK(cached_block_bytes() == 0);
}

TEST_CASE("small blocks: a thread keeps at most 8 of a size class, 64-aligned, until released",
          "[block_cache]") {
  release_cached_blocks();
  REQUIRE(detail::small_block_bytes_kept() == 0);
  {
    std::vector<Tensor> many;
    for (int i = 0; i < 12; ++i) {
      many.push_back(empty({16}, DType::Float32));  // 64 bytes: the first class
      CHECK(reinterpret_cast<uintptr_t>(many.back().raw_data()) % detail::kBlockAlignment == 0);
    }
  }
  CHECK(detail::small_block_bytes_kept() == 8 * 64);  // 8 kept, 4 freed
  // A request of the class takes one back; 400 and 440 bytes share the 448-byte class.
  { Tensor t = empty({16}, DType::Float32); CHECK(detail::small_block_bytes_kept() == 7 * 64); }
  const void* first = empty({100}, DType::Float32).raw_data();
  CHECK(detail::small_block_bytes_kept() == 8 * 64 + 448);
  Tensor same_class = empty({110}, DType::Float32);
  CHECK(same_class.raw_data() == first);
  // Another thread keeps its own; this thread's stay here.
  size_t other = 1;
  std::thread([&] {
    { Tensor t = empty({16}, DType::Float32); }
    other = detail::small_block_bytes_kept();
  }).join();
  CHECK(other == 64);
  CHECK(detail::small_block_bytes_kept() == 8 * 64);
  // Over 4 KiB and under 128 KiB: classes of eighths of a power of two (4100 bytes take 4608),
  // kept here too and never counted as the shared cache's bytes.
  const void* medium = nullptr;
  {
    Tensor t = empty({1025}, DType::Float32);
    medium = t.raw_data();
    CHECK(reinterpret_cast<uintptr_t>(medium) % detail::kBlockAlignment == 0);
  }
  CHECK(detail::small_block_bytes_kept() == 8 * 64 + 4608);
  CHECK(cached_block_bytes() == 0);
  {
    Tensor t = empty({4608}, DType::UInt8);  // the same class
    CHECK(t.raw_data() == medium);
    CHECK(detail::small_block_bytes_kept() == 8 * 64);
  }
  { Tensor t = empty({(128 << 10) - 1}, DType::UInt8); }  // the last class: 128 KiB blocks
  CHECK(detail::small_block_bytes_kept() == 8 * 64 + 4608 + (128 << 10));
  CHECK(cached_block_bytes() == 0);
  release_cached_blocks();
  CHECK(detail::small_block_bytes_kept() == 0);
}

TEST_CASE("small blocks a thread cannot keep reach a thread that makes tensors", "[block_cache]") {
  release_cached_blocks();
  // One thread makes, another drops (a group's worker dropping the caller's tensors): the
  // dropping thread keeps 8, the other 4 go to the process's depot, where a third thread, whose
  // lists are empty, finds one instead of allocating.
  std::vector<Tensor> made;
  std::vector<const void*> places;
  std::thread([&] {
    for (int i = 0; i < 12; ++i) made.push_back(empty({48}, DType::Float32));  // 192 bytes
    for (const Tensor& t : made) places.push_back(t.raw_data());
  }).join();
  std::thread([&] { made.clear(); }).join();
  bool reused = false;
  std::thread([&] {
    Tensor t = empty({48}, DType::Float32);
    for (const void* p : places) reused = reused || p == t.raw_data();
  }).join();
  CHECK(reused);
  release_cached_blocks();  // the depot's too
}

TEST_CASE("blocks over 4 KiB: a thread keeps at most 4 MiB of them", "[block_cache]") {
  release_cached_blocks();
  {
    std::vector<Tensor> many;
    for (int i = 0; i < 8; ++i) many.push_back(empty({64 << 10}, DType::UInt8));
    for (int i = 0; i < 8; ++i) many.push_back(empty({96 << 10}, DType::UInt8));
    for (int i = 0; i < 8; ++i) many.push_back(empty({128 << 10}, DType::UInt8));  // shared cache
  }
  // 8 x 64 KiB and 8 x 96 KiB (1.25 MiB) fit; the 128 KiB blocks went to the shared cache.
  CHECK(detail::small_block_bytes_kept() == size_t{8 * 64 + 8 * 96} << 10);
  CHECK(cached_block_bytes() == size_t{8 * 128} << 10);
  {
    std::vector<Tensor> more;
    for (int i = 1; i <= 40; ++i) more.push_back(empty({(112 << 10) + i}, DType::UInt8));
  }
  // 8 of the 120 KiB class (112 KiB + i rounds up to it) fit in the remaining room; 32 were freed.
  CHECK(detail::small_block_bytes_kept() == size_t{8 * 64 + 8 * 96 + 8 * 120} << 10);
  CHECK(detail::small_block_bytes_kept() <= size_t{4} << 20);
  release_cached_blocks();
  CHECK(detail::small_block_bytes_kept() == 0);
}

TEST_CASE("blocks of 2 MiB and more start on a huge page boundary and are reused as such",
          "[block_cache]") {
  // The suite does not set FERRY_HUGE_PAGES: on (every Linux build, whatever the host's THP
  // setting, which only decides whether the kernel backs them with huge pages).
#if defined(__linux__)
  REQUIRE(config().huge_pages);
  release_cached_blocks();
  const auto aligned = [](const void* p) {
    return reinterpret_cast<uintptr_t>(p) % detail::kHugePageBytes == 0;
  };
  const void* first = nullptr;
  {
    // 2 MiB + 4: the 2.25 MiB class, mapped to its length (not rounded up to 4 MiB) and
    // counted as such.
    Tensor t = empty({int64_t{detail::kHugeMinBytes} + 4}, DType::UInt8);
    first = t.raw_data();
    CHECK(aligned(first));
    std::memset(t.raw_data(), 1, t.nbytes());
  }
  CHECK(cached_block_bytes() == size_t{9} << 18);
  {
    // A tensor of the whole class takes the same block: every byte of the mapping writable.
    // (Bytes past a tensor's own are not its to write: under AddressSanitizer they are
    // poisoned.)
    Tensor again = empty({int64_t{9} << 18}, DType::UInt8);
    CHECK(again.raw_data() == first);
    std::memset(again.raw_data(), 2, again.nbytes());
  }
  for (const int64_t mib : {2, 3, 16, 64}) {
    Tensor t = empty({mib << 18}, DType::Float32);
    INFO(mib << " MiB");
    CHECK(aligned(t.raw_data()));
  }
  // The cache's limit is counted in blocks' bytes; clearing it unmaps them all.
  release_cached_blocks();
  CHECK(cached_block_bytes() == 0);
#endif
}
