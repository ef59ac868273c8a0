// The interposed allocator behind heap_allocations(): each entry point counts, then forwards
// to glibc's own implementation (__libc_malloc and the others, exported for exactly this).
#include "tools/heap_count/heap_allocations.h"

#include <atomic>
#include <cerrno>
#include <cstddef>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define FTEST_COUNT_ALLOCATIONS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define FTEST_COUNT_ALLOCATIONS 0
#endif
#endif
#ifndef FTEST_COUNT_ALLOCATIONS
#define FTEST_COUNT_ALLOCATIONS 1
#endif

namespace {
std::atomic<uint64_t> allocations{0};
[[maybe_unused]] void count() { allocations.fetch_add(1, std::memory_order_relaxed); }
}  // namespace

namespace ferry::tools {
uint64_t heap_allocations() { return allocations.load(std::memory_order_relaxed); }
bool counting_heap_allocations() { return FTEST_COUNT_ALLOCATIONS != 0; }
}  // namespace ferry::tools

#if FTEST_COUNT_ALLOCATIONS
extern "C" {

void* __libc_malloc(size_t size);
void* __libc_calloc(size_t count, size_t size);
void* __libc_realloc(void* ptr, size_t size);
void* __libc_memalign(size_t alignment, size_t size);

void* malloc(size_t size) noexcept {
  count();
  return __libc_malloc(size);
}

void* calloc(size_t n, size_t size) noexcept {
  count();
  return __libc_calloc(n, size);
}

void* realloc(void* ptr, size_t size) noexcept {
  count();
  return __libc_realloc(ptr, size);
}

void* memalign(size_t alignment, size_t size) noexcept {
  count();
  return __libc_memalign(alignment, size);
}

void* aligned_alloc(size_t alignment, size_t size) noexcept {
  count();
  return __libc_memalign(alignment, size);
}

int posix_memalign(void** out, size_t alignment, size_t size) noexcept {
  // POSIX: a power of two that is a multiple of sizeof(void*).
  if (alignment % sizeof(void*) != 0 || (alignment & (alignment - 1)) != 0) return EINVAL;
  count();
  void* p = __libc_memalign(alignment, size);
  if (p == nullptr && size != 0) return ENOMEM;
  *out = p;
  return 0;
}

}  // extern "C"
#endif
