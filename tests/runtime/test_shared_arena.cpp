// Tensors in shared memory (Tensor::share_memory_, empty_shared; runtime/shared_arena.h): where
// they lie, what moving a tensor there keeps, blocks given back and reused, and a chunk that
// another process can open through /proc/<pid>/fd and map to see the same bytes.
#include <ferry/runtime/block_cache.h>
#include <ferry/runtime/free_ranges.h>
#include <ferry/runtime/shared_arena.h>
#include <ferry/runtime/tensor.h>
#include <ferry/runtime/tensor_detail.h>

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace ferry;

namespace {

// Whether /dev/shm holds any name starting with "ferry-arena".
bool arena_names_in_dev_shm() {
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return false;
  bool found = false;
  while (dirent* e = readdir(dir)) found = found || std::strncmp(e->d_name, "ferry-arena", 11) == 0;
  closedir(dir);
  return found;
}

}  // namespace

TEST_CASE("empty_shared lies in the shared arena, as do its views; empty does not",
          "[shared_arena]") {
  Tensor s = empty_shared({1000, 3}, DType::Float64);
  Tensor p = empty({1000, 3}, DType::Float64);
  CHECK(s.is_shared());
  CHECK_FALSE(p.is_shared());
  CHECK(s.narrow(0, 10, 5).is_shared());
  CHECK(reinterpret_cast<uintptr_t>(s.raw_data()) % detail::kSharedGrain == 0);
  CHECK(detail::in_shared_arena(s.raw_data(), s.nbytes()));
  CHECK_FALSE(detail::in_shared_arena(p.raw_data(), p.nbytes()));
  CHECK_FALSE(s.clone().is_shared());  // a copy is ordinary, as torch's clone
  CHECK_FALSE(arena_names_in_dev_shm());
}

TEST_CASE("share_memory_ moves the bytes for the tensor and its views, once", "[shared_arena]") {
  Tensor t = arange(5000, DType::Int32).reshape({50, 100});
  Tensor row = t.narrow(0, 7, 1);
  const void* was = t.raw_data();
  t.share_memory_();
  CHECK(t.is_shared());
  CHECK(row.is_shared());
  CHECK(t.raw_data() != was);
  CHECK(detail::in_shared_arena(t.raw_data(), t.nbytes()));
  CHECK(equal(t, arange(5000, DType::Int32).reshape({50, 100})));
  CHECK(row.get_flat(0) == 700);
  const void* now = t.raw_data();
  t.share_memory_();  // already there: nothing moves
  CHECK(t.raw_data() == now);
  row.fill_(-1);  // a view writes the moved storage
  CHECK(t.get_flat(700) == -1);
}

// What a shared-memory op whose peers may still write into its output does when it fails
// (collectives/shm/shm_ops.cpp): the tensor and its views move to fresh memory of the same kind
// with the same bytes, and the old memory is handed back as a storage of its own, which the op
// keeps for the process's life (while held, the next tensors of that size get other memory);
// the caller's own memory stays where it is.
TEST_CASE("move_to_fresh_memory moves a tensor's bytes and hands back the old memory",
          "[shared_arena]") {
  for (const bool shared : {false, true}) {
    INFO((shared ? "in shared memory" : "private"));
    Tensor t = arange(100000, DType::Float32);  // 400 KB: a block of the huge page arena
    if (shared) t.share_memory_();
    Tensor tail = t.narrow(0, 99990, 10);
    const void* was = t.raw_data();
    std::shared_ptr<detail::Storage> old_memory = detail::move_to_fresh_memory(*detail::storage_of(t));
    REQUIRE(old_memory != nullptr);
    CHECK(old_memory->data_ == was);
    CHECK(old_memory->shared_ == shared);
    CHECK(t.raw_data() != was);
    CHECK(t.is_shared() == shared);
    CHECK(equal(t, arange(100000, DType::Float32)));
    tail.fill_(-1);  // the view follows
    CHECK(t.get_flat(99995) == -1);
    // While the old memory is held, tensors of its size get other memory.
    std::vector<Tensor> next;
    for (int i = 0; i < 4; ++i) {
      next.push_back(shared ? empty_shared({100000}) : empty({100000}));
      CHECK(next.back().raw_data() != was);
    }
  }
  std::vector<float> mine(16, 1.0f);
  Tensor blob = Tensor::from_blob(mine.data(), {16}, DType::Float32);
  CHECK(detail::move_to_fresh_memory(*detail::storage_of(blob)) == nullptr);
  CHECK(blob.raw_data() == mine.data());
}

TEST_CASE("share_memory_ refuses memory the caller owns", "[shared_arena]") {
  std::vector<float> mine(16, 1.0f);
  Tensor t = Tensor::from_blob(mine.data(), {16}, DType::Float32);
  try {
    t.share_memory_();
    FAIL("share_memory_ of a from_blob tensor did not throw");
  } catch (const InvalidArgument& e) {
    CHECK(std::string(e.what()).find("from_blob") != std::string::npos);
  }
  CHECK_FALSE(t.is_shared());
}

TEST_CASE("a freed shared block is given back", "[shared_arena]") {
  const size_t in_use = detail::shared_bytes_in_use();
  {
    Tensor a = empty_shared({10000}, DType::UInt8);  // 3 pages
    Tensor b = empty_shared({5000}, DType::UInt8);   // 2 pages
    Tensor none = empty_shared({0}, DType::UInt8);   // a page all the same
    CHECK(detail::shared_bytes_in_use() == in_use + 6 * detail::kSharedGrain);
  }
  CHECK(detail::shared_bytes_in_use() == in_use);
}

// The pages a chunk's memory file holds now (st_blocks counts 512-byte units).
size_t resident_bytes(const detail::SharedChunk& c) {
  struct stat st {};
  REQUIRE(fstat(c.fd, &st) == 0);
  return static_cast<size_t>(st.st_blocks) * 512;
}

TEST_CASE("a freed block keeps its pages until release_cached_blocks gives them back",
          "[shared_arena]") {
  constexpr size_t kBytes = size_t{8} << 20;
  size_t chunk = 0;
  size_t before = 0;
  {
    Tensor t = empty_shared({static_cast<int64_t>(kBytes)}, DType::UInt8);
    t.fill_(1);  // every page touched
    while (chunk < detail::shared_chunk_count() &&
           !(detail::shared_chunk(chunk).address <= reinterpret_cast<uintptr_t>(t.raw_data()) &&
             reinterpret_cast<uintptr_t>(t.raw_data()) <
                 detail::shared_chunk(chunk).address + detail::shared_chunk(chunk).bytes))
      ++chunk;
    REQUIRE(chunk < detail::shared_chunk_count());
    before = resident_bytes(detail::shared_chunk(chunk));
    CHECK(before >= kBytes);
  }
  CHECK(resident_bytes(detail::shared_chunk(chunk)) == before);  // kept for the next request
  release_cached_blocks();
  CHECK(resident_bytes(detail::shared_chunk(chunk)) + kBytes <= before);
  // The block's place is handed out again, its pages fresh and zero.
  Tensor again = empty_shared({static_cast<int64_t>(kBytes)}, DType::UInt8);
  CHECK(again.get_flat(0) == 0);
  CHECK(again.get_flat(static_cast<int64_t>(kBytes) - 1) == 0);
}

TEST_CASE("free ranges: best fit, the rest kept, neighbours merged when given back",
          "[shared_arena]") {
  detail::FreeRanges f;
  f.add_region(0, 100);
  f.add_region(1, 30);
  auto a = f.take(20);  // the smallest range that holds 20: region 1
  REQUIRE(a);
  CHECK((a->region == 1 && a->offset == 0));
  auto b = f.take(10);  // region 1's rest, exactly
  REQUIRE(b);
  CHECK((b->region == 1 && b->offset == 20));
  CHECK_FALSE(f.take(101));
  auto c = f.take(40), d = f.take(40), e = f.take(20);
  REQUIRE((c && d && e));
  CHECK((c->offset == 0 && d->offset == 40 && e->offset == 80 && e->region == 0));
  CHECK_FALSE(f.take(1));
  f.give(*c, 40);
  f.give(*e, 20);
  CHECK(f.ranges() == 2);
  CHECK_FALSE(f.take(60));  // two ranges of 40 and 20, apart
  f.give(*d, 40);           // joins both
  CHECK(f.ranges() == 1);
  auto whole = f.take(100);
  REQUIRE(whole);
  CHECK((whole->region == 0 && whole->offset == 0));
}

TEST_CASE("a freed block is handed out again for its size; kept blocks merge before the arena "
          "grows",
          "[shared_arena]") {
  const size_t chunks = detail::shared_chunk_count();
  void* a = detail::acquire_shared_block(100000, "test");
  void* b = detail::acquire_shared_block(100000, "test");
  detail::release_shared_block(a, 100000);
  CHECK(detail::acquire_shared_block(99000, "test") == a);  // the same pages: 25 of them
  void* c = detail::acquire_shared_block(20000, "test");
  CHECK(c != a);
  detail::release_shared_block(a, 99000);
  detail::release_shared_block(b, 100000);
  detail::release_shared_block(c, 20000);
  // The whole first chunk asked for, every block freed: the kept blocks go back to the free
  // ranges first, merged with their neighbours, and the arena does not grow. In the file's
  // order the first chunk is the only one, and the block is that chunk; run after a case that
  // made a larger chunk (Catch's --order rand), the block may come from that one instead.
  REQUIRE(detail::shared_bytes_in_use() == 0);
  const size_t whole_chunk = detail::shared_chunk(0).bytes;
  void* whole = detail::acquire_shared_block(whole_chunk, "test");
  CHECK(detail::shared_chunk_count() == chunks);
  if (chunks == 1) CHECK(whole == reinterpret_cast<void*>(detail::shared_chunk(0).address));
  detail::release_shared_block(whole, whole_chunk);
}

TEST_CASE("a request larger than the free ranges makes a new chunk", "[shared_arena]") {
  const size_t chunks = detail::shared_chunk_count();
  Tensor big = empty_shared({int64_t{80} << 20}, DType::UInt8);  // more than a 64 MiB chunk
  CHECK(detail::shared_chunk_count() == chunks + 1);
  const detail::SharedChunk& c = detail::shared_chunk(detail::shared_chunk_count() - 1);
  CHECK(c.bytes >= size_t{80} << 20);
  CHECK(detail::in_shared_arena(big.raw_data(), big.nbytes()));
}

TEST_CASE("a chunk opened through /proc/self/fd and mapped shows the tensor's bytes",
          "[shared_arena]") {
  Tensor t = empty_shared({4096}, DType::Int64);
  for (int64_t i = 0; i < t.numel(); ++i) t.set_flat(i, static_cast<double>(3 * i + 1));
  const auto at = reinterpret_cast<uintptr_t>(t.raw_data());
  const detail::SharedChunk* chunk = nullptr;
  for (size_t i = 0; i < detail::shared_chunk_count(); ++i) {
    const detail::SharedChunk& c = detail::shared_chunk(i);
    if (at >= c.address && at < c.address + c.bytes) chunk = &c;
  }
  REQUIRE(chunk != nullptr);
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", static_cast<int>(chunk->fd));
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  void* view = mmap(nullptr, chunk->bytes, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  REQUIRE(view != MAP_FAILED);
  const auto* seen = reinterpret_cast<const int64_t*>(static_cast<const char*>(view) +
                                                      (at - chunk->address));
  CHECK(seen[0] == 1);
  CHECK(seen[4095] == 3 * 4095 + 1);
  t.set_flat(17, -5);  // a later write is seen through the other mapping too
  CHECK(seen[17] == -5);
  munmap(view, chunk->bytes);
}

TEST_CASE("a size whose rounding up would wrap is refused, naming the op and the bytes",
          "[shared_arena]") {
  const size_t chunks = detail::shared_chunk_count();
  const size_t in_use = detail::shared_bytes_in_use();
  // 2^64 - 8 B: no overflow in the shape, but rounding it up to a page wrapped to 0 B.
  CHECK_THROWS_WITH(empty_shared({(int64_t{1} << 61) - 1}, DType::Float64),
                    Catch::Contains("empty_shared") && Catch::Contains("18446744073709551608 B"));
  CHECK_THROWS_AS(empty_shared({(int64_t{1} << 61) - 1}, DType::Float64), InvalidArgument);
  // Near SIZE_MAX the page rounding holds, the chunk's 2 MiB rounding wrapped.
  CHECK_THROWS_AS(detail::acquire_shared_block(SIZE_MAX - 8192, "test"), InvalidArgument);
  CHECK_THROWS_AS(detail::acquire_shared_block(detail::kMaxSharedBlock + 1, "test"),
                  InvalidArgument);
  CHECK(detail::shared_chunk_count() == chunks);
  CHECK(detail::shared_bytes_in_use() == in_use);
  // release mirrors: such a size names no block, and nothing is given back.
  Tensor t = empty_shared({10}, DType::UInt8);
  detail::release_shared_block(t.raw_data(), SIZE_MAX - 8192);
  CHECK(detail::shared_bytes_in_use() == in_use + detail::kSharedGrain);
}
