// The memory of awaitables' shared states (awaitable.h): the per-thread object pool.
#include <ferry/runtime/awaitable.h>
#include <ferry/runtime/object_pool.h>

namespace ferry::awaitable_memory {

void* take(size_t bytes) { return detail::pool_take(bytes); }
void give(void* block, size_t bytes) noexcept { detail::pool_give(block, bytes); }

}  // namespace ferry::awaitable_memory
