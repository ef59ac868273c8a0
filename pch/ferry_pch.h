// Precompiled header of the library and of the larger tools and test targets (their meson.build
// names it as cpp_pch; Meson passes it to every source of the target with -include). Only
// third-party headers: parsing the standard library and Eigen/Core is about half the compile
// time of an ordinary ferry source on GCC 12 at -O3 (collectives/group.cpp: 3.6 s of CPU
// without, 1.9 s with the PCH; 2026-11-29, 2-core VM), and these headers do not change with
// ferry's code. ferry's own headers stay out: a change to one of them rebuilds only the sources
// that include it. Building the PCH costs about 8 s of CPU per target, so only targets with many
// sources use one.
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
