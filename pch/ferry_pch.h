// Precompiled header of the library and of the larger tools and test targets (their meson.build
// names it as cpp_pch; Meson passes it to every source of the target with -include). Only
// third-party headers: parsing the standard library and Eigen/Core is most of the compile time
// of an ordinary ferry source (about 2 of its 3 s of CPU on GCC 12 at -O3), and these headers
// never change with ferry's code, so the PCH is rebuilt only when the flags change. ferry's own
// headers stay out: a change to one of them rebuilds only the sources that include it.
// `-Db_pch=false` builds without it (e.g. to check that a source includes what it uses).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <Eigen/Core>
