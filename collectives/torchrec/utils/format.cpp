#include <ferry/collectives/torchrec/utils/format.h>

#include <ferry/runtime/error.h>

#include <numeric>
#include <sstream>

namespace ferry::torchrec::detail {

namespace {

// "[a, b, ...]" of the first `limit` items, then ", ... (N <what>)".
template <class T, class Write>
std::string bracketed(const std::vector<T>& items, size_t limit, const char* sep,
                      const char* what, Write write) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < items.size() && i < limit; ++i) {
    if (i) os << sep;
    write(os, items[i]);
  }
  if (items.size() > limit) os << ", ... (" << items.size() << " " << what << ")";
  os << ']';
  return os.str();
}

}  // namespace

std::string list_str(const std::vector<int64_t>& values, size_t limit) {
  return bracketed(values, limit, ", ", "entries",
                   [](std::ostream& os, int64_t v) { os << v; });
}

std::string compact_list_str(const std::vector<int>& values) {
  return bracketed(values, kEveryEntry, ",", "entries", [](std::ostream& os, int v) { os << v; });
}

std::string keys_str(const std::vector<std::string>& keys, size_t limit) {
  return bracketed(keys, limit, ", ", "keys",
                   [](std::ostream& os, const std::string& k) { os << '"' << k << '"'; });
}

int64_t sum_of(const std::vector<int64_t>& values) {
  return std::accumulate(values.begin(), values.end(), int64_t{0});
}

}  // namespace ferry::torchrec::detail
