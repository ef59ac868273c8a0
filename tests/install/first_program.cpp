// The README's first program ("First program"): tests/install/check.sh compiles it
// against an installed ferry with pkg-config and runs it.
#include <ferry/ferry.h>

#include <atomic>
#include <cstdio>

int main() {
  std::printf("ferry %s\n", ferry::version());
  std::atomic<int> wrong{0};
  ferry::run_ranks(4, [&](ferry::Group& world) {       // 4 ranks as threads (local transport)
    ferry::Tensor x = ferry::full({1024}, world.rank() + 1.0);
    ferry::all_reduce(x, world).wait();                // every element: 1+2+3+4 = 10
    for (int64_t i = 0; i < x.numel(); ++i)
      if (x.get_flat(i) != 10.0) ++wrong;
  });
  if (wrong != 0) {
    std::printf("all_reduce: %d wrong elements\n", wrong.load());
    return 1;
  }
  std::printf("all_reduce over 4 ranks: every element is 10, as expected\n");
  return 0;
}
