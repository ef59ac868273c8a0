// The interposed allocator behind heap_allocations(). The executable's definitions of malloc
// and friends take precedence over libc's for every library of the process (ELF symbol
// interposition); each forwards to glibc's own implementation (__libc_malloc and the others,
// which glibc exports for exactly this purpose) after counting. free is not interposed: only
// allocations are counted.
#include "tools/dlrm/alloc_count.h"

#include <atomic>
#include <cerrno>
#include <cstddef>

// Under a sanitizer its runtime owns malloc: nothing is interposed and nothing is counted.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define FERRY_COUNT_ALLOCATIONS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define FERRY_COUNT_ALLOCATIONS 0
#endif
#endif
#ifndef FERRY_COUNT_ALLOCATIONS
#define FERRY_COUNT_ALLOCATIONS 1
#endif

#if FERRY_COUNT_ALLOCATIONS
extern "C" {
void* __libc_malloc(size_t size);
void* __libc_calloc(size_t count, size_t size);
void* __libc_realloc(void* ptr, size_t size);
void* __libc_memalign(size_t alignment, size_t size);
}

#endif

namespace {
std::atomic<uint64_t> allocations{0};
[[maybe_unused]] void count() { allocations.fetch_add(1, std::memory_order_relaxed); }
}  // namespace

namespace ferry::dlrm_tool {
uint64_t heap_allocations() { return allocations.load(std::memory_order_relaxed); }
}  // namespace ferry::dlrm_tool

#if FERRY_COUNT_ALLOCATIONS
extern "C" {

void* malloc(size_t size) noexcept {
  count();
  return __libc_malloc(size);
}

void* calloc(size_t count_, size_t size) noexcept {
  count();
  return __libc_calloc(count_, size);
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
#endif  // FERRY_COUNT_ALLOCATIONS
