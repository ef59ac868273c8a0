// The consumer that tests/install/check.sh builds with CMake and with Meson (ferry as a
// subproject): one collective and the version, through the narrow headers a program may include
// instead of <ferry/ferry.h>.
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/run_ranks.h>
#include <ferry/runtime/version.h>

#include <atomic>
#include <cstdio>
#include <cstring>

int main() {
  // The header this was compiled against and the library it runs with must agree.
  if (std::strcmp(ferry::version(), FERRY_VERSION_STRING) != 0) {
    std::printf("header version %s, library version %s\n", FERRY_VERSION_STRING, ferry::version());
    return 1;
  }
  std::atomic<int> wrong{0};
  ferry::run_ranks(3, [&](ferry::Group& world) {
    ferry::Tensor x = ferry::full({64}, world.rank() + 1.0);
    ferry::all_reduce(x, world).wait();  // 1+2+3 = 6
    for (int64_t i = 0; i < x.numel(); ++i)
      if (x.get_flat(i) != 6.0) ++wrong;
  });
  std::printf("consumer: ferry %s, all_reduce %s\n", ferry::version(), wrong == 0 ? "ok" : "WRONG");
  return wrong == 0 ? 0 : 1;
}
