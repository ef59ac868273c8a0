// The rules every FERRY_* variable is read with (see config.h): the list of known variables,
// parsing with one set of rules, the nearest known name for a misspelt one.
#include <ferry/runtime/config.h>

#include <ferry/runtime/error.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>

namespace ferry {

const std::vector<SettingInfo>& known_settings() {
  static const std::vector<SettingInfo> all = {
      {"FERRY_TIMEOUT", "seconds, 0.001 to 1e9", "300", true},
      {"FERRY_CHECK", "boolean", "0", true},
      {"FERRY_ALGO", "op:algorithm list", "", true},
      {"FERRY_DEBUG", "off, warn, info, trace", "off", true},
      {"FERRY_DEBUG_FILE", "path with %h, %p, %r", "", true},
      {"FERRY_STALL_WARN_S", "seconds, 0 (off) or 0.001 to 1e9", "min(60, FERRY_TIMEOUT / 4)",
       true},
      {"FERRY_TIMELINE", "path with %h, %p, %r", "", true},
      {"FERRY_DEBUG_SUBSYS", "list of init, coll, transport, ucx, codec, torchrec, all", "",
       true},
      {"FERRY_HOST_CACHE_MB", "MiB, 0 to 2^30 - 1", "256", true},
      {"FERRY_HUGE_PAGES", "boolean", "1", true},
      {"FERRY_BACKEND", "local, mpi, ucx", "", true},
      {"FERRY_MPI_PERSISTENT", "boolean", "1", true},
      {"FERRY_MPI_EXCHANGE", "boolean", "1", true},
      {"FERRY_PROGRESS_THREAD", "boolean", "1", true},
      {"FERRY_SHM_PEER_READS", "boolean", "1", true},
      {"FERRY_UCX_CMA", "boolean", "1", true},
      {"FERRY_UCX_CMA_MIN_BYTES", "bytes, at least 1024", "65536", true},
      {"FERRY_UCX_ERROR_HANDLING", "peer, none", "peer", true},
      {"FERRY_RENDEZVOUS", "host:port", "", true},
      {"FERRY_RANK", "0 to world size - 1", "", true},
      {"FERRY_WORLD_SIZE", "1 to 2^20", "", true},
      {"FERRY_SECRET", "1 to 256 bytes", "", true},
      {"FERRY_RENDEZVOUS_BIND", "address", "127.0.0.1", true},
      {"FERRY_RENDEZVOUS_FD", "file descriptor (ferry-run sets it)", "", true},
      // Switches of the tools and tests, known so that they draw no warning.
      {"FERRY_RUN_BINARY", "path (tests)", "", false},
      {"FERRY_BENCH_KJT_BACKGROUND", "boolean (ferry-bench)", "", false},
      {"FERRY_UCX_TEST_PARAM", "(tests)", "", false},
  };
  return all;
}

namespace detail {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string get_or(const std::function<const char*(const char*)>& get, const char* name) {
  const char* v = get(name);
  return v == nullptr ? std::string() : std::string(v);
}

// One of `choices` (lower case), in any case; "" stays "" (the default).
std::string one_of(const char* variable, const std::string& text,
                   const std::vector<const char*>& choices) {
  if (text.empty()) return text;
  const std::string v = lower(text);
  for (const char* c : choices)
    if (v == c) return v;
  std::string list;
  for (const char* c : choices) list.append(list.empty() ? "" : ", ").append(c);
  FERRY_THROW(InvalidArgument, variable, ": expected one of ", list, " (any case), given '",
              text, "'");
}

int64_t integer_in(const char* variable, const std::string& text, int64_t lo, int64_t hi,
                   const char* what) {
  // Digits only: strtoll would also take leading blanks and a sign (" 16", "+16", "-0").
  int64_t v = -1;
  const char* first = text.data();
  const char* last = first + text.size();
  const auto [end, ec] = std::from_chars(first, last, v);
  FERRY_CHECK(first != last && std::isdigit(static_cast<unsigned char>(*first)) &&
                  ec == std::errc() && end == last && v >= lo && v <= hi,
              InvalidArgument, variable, ": expected ", what, " (decimal digits) from ", lo,
              " to ", hi, ", given '", text, "'");
  return v;
}

// A plain decimal number: digits with an optional fraction and exponent ("300", "2.5", "1e3").
// Not strtod's wider syntax: it takes hex ("0x10" is 16), inf, nan, leading blanks and a sign,
// and reads the decimal point of the C locale the program may have changed.
std::optional<double> plain_decimal(const std::string& text) {
  size_t i = 0;
  size_t digits = 0;
  auto skip_digits = [&] {
    size_t n = 0;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i, ++n;
    return n;
  };
  digits += skip_digits();
  if (i < text.size() && text[i] == '.') {
    ++i;
    digits += skip_digits();
  }
  if (digits == 0) return std::nullopt;
  const bool nonzero = text.find_first_of("123456789") < i;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
    if (skip_digits() == 0) return std::nullopt;
  }
  if (i != text.size()) return std::nullopt;
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;  // 1e400
  if (v == 0.0 && nonzero) return std::nullopt;  // 1e-400 underflowed: not the 0 it reads as
  return v;
}

// Seconds in [kMinTimeout, kMaxTimeout], or 0 exactly when `zero_is_off` (returned as zero).
std::chrono::milliseconds parse_seconds(const char* variable, const std::string& text,
                                        bool zero_is_off) {
  const std::optional<double> seconds = plain_decimal(text);
  if (zero_is_off && seconds && *seconds == 0.0) return std::chrono::milliseconds::zero();
  // Checked before any conversion: a double outside int64's range (1e300) converts with
  // undefined behaviour, and one that fits could still overflow the clock when added to now.
  // Below a millisecond would round to no deadline at all.
  FERRY_CHECK(seconds && *seconds * 1000.0 >= static_cast<double>(kMinTimeout.count()) - 0.5 &&
                  *seconds * 1000.0 <= static_cast<double>(kMaxTimeout.count()),
              InvalidArgument, variable, ": expected a decimal number of seconds (like 300, 2.5 ",
              "or 1e3", zero_is_off ? "), 0 (off) or from " : ") from ",
              kMinTimeout.count() / 1000.0, " to ", kMaxTimeout.count() / 1000, ", given '", text,
              "'");
  return std::max(kMinTimeout, std::chrono::milliseconds(std::llround(*seconds * 1000.0)));
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

}  // namespace

bool parse_bool(const char* variable, const std::string& text) {
  const std::string v = lower(text);
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  FERRY_THROW(InvalidArgument, variable, ": expected 1/0, true/false, yes/no or on/off (any ",
              "case), given '", text, "'");
}

std::chrono::milliseconds parse_timeout(const char* variable, const std::string& text) {
  return parse_seconds(variable, text, false);
}

Config read_config(const std::function<const char*(const char*)>& get) {
  Config c;
  auto text = [&](const char* name) { return get_or(get, name); };
  auto boolean = [&](const char* name, bool fallback) {
    const std::string v = text(name);
    return v.empty() ? fallback : parse_bool(name, v);
  };
  if (const std::string t = text("FERRY_TIMEOUT"); !t.empty())
    c.timeout = parse_timeout("FERRY_TIMEOUT", t);
  c.backend = one_of("FERRY_BACKEND", text("FERRY_BACKEND"), {"local", "mpi", "ucx"});
  c.algo = lower(text("FERRY_ALGO"));
  c.debug = one_of("FERRY_DEBUG", text("FERRY_DEBUG"), {"off", "warn", "info", "trace"});
  if (c.debug.empty()) c.debug = "off";
  c.debug_file = text("FERRY_DEBUG_FILE");  // a path: case kept
  // 0 turns the warning off; otherwise the same syntax and range as FERRY_TIMEOUT.
  if (const std::string t = text("FERRY_STALL_WARN_S"); !t.empty())
    c.stall_warn = parse_seconds("FERRY_STALL_WARN_S", t, true);
  c.timeline = text("FERRY_TIMELINE");  // a path: case kept
  c.debug_subsys = lower(text("FERRY_DEBUG_SUBSYS"));
  {
    std::stringstream list(c.debug_subsys);
    std::string item;
    const std::vector<const char*> known = {"init", "coll",     "transport", "ucx",
                                            "codec", "torchrec", "all"};
    while (std::getline(list, item, ',')) {
      if (std::find_if(known.begin(), known.end(), [&](const char* k) { return item == k; }) ==
          known.end())
        FERRY_THROW(InvalidArgument, "FERRY_DEBUG_SUBSYS: expected a comma list of init, coll, ",
                    "transport, ucx, codec, torchrec, all (any case); '", item,
                    "' is none of them, given '", text("FERRY_DEBUG_SUBSYS"), "'");
    }
  }
  c.progress_thread = boolean("FERRY_PROGRESS_THREAD", true);
  c.check = boolean("FERRY_CHECK", false);
  if (const std::string v = text("FERRY_HOST_CACHE_MB"); !v.empty())
    c.host_cache_mb = integer_in("FERRY_HOST_CACHE_MB", v, 0, (int64_t{1} << 30) - 1,
                                 "a number of MiB (0 turns the cache off)");
  c.huge_pages = boolean("FERRY_HUGE_PAGES", true);
  c.mpi_persistent = boolean("FERRY_MPI_PERSISTENT", true);
  c.mpi_exchange = boolean("FERRY_MPI_EXCHANGE", true);
  c.shm_peer_reads = boolean("FERRY_SHM_PEER_READS", true);
  c.ucx_cma = boolean("FERRY_UCX_CMA", true);
  if (const std::string v = text("FERRY_UCX_CMA_MIN_BYTES"); !v.empty())
    c.ucx_cma_min_bytes = static_cast<uint64_t>(integer_in(
        "FERRY_UCX_CMA_MIN_BYTES", v, 1024, int64_t{1} << 62, "a byte count"));
  c.ucx_peer_errors =
      one_of("FERRY_UCX_ERROR_HANDLING", text("FERRY_UCX_ERROR_HANDLING"), {"peer", "none"}) !=
      "none";
  c.rendezvous = text("FERRY_RENDEZVOUS");
  c.rank = text("FERRY_RANK");
  c.world_size = text("FERRY_WORLD_SIZE");
  c.secret = text("FERRY_SECRET");
  c.rendezvous_bind = text("FERRY_RENDEZVOUS_BIND");
  if (const std::string v = text("FERRY_RENDEZVOUS_FD"); !v.empty())
    c.rendezvous_fd = static_cast<int>(
        integer_in("FERRY_RENDEZVOUS_FD", v, 0, (int64_t{1} << 31) - 1, "a file descriptor"));
  return c;
}

std::vector<std::pair<std::string, std::string>> unknown_settings(char** env) {
  std::vector<std::pair<std::string, std::string>> unknown;
  for (char** e = env; e != nullptr && *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    const std::string name(*e, eq == nullptr ? std::strlen(*e) : static_cast<size_t>(eq - *e));
    if (name.rfind("FERRY_", 0) != 0) continue;
    const SettingInfo* nearest = nullptr;
    size_t best = SIZE_MAX;
    bool known = false;
    for (const SettingInfo& s : known_settings()) {
      if (name == s.name) known = true;
      const size_t d = edit_distance(name, s.name);
      if (d < best) {
        best = d;
        nearest = &s;
      }
    }
    if (!known) unknown.emplace_back(name, nearest ? nearest->name : "");
  }
  return unknown;
}

std::string describe_settings(const Config& c) {
  auto on = [](bool b) { return b ? "1" : "0"; };
  return str("FERRY_TIMEOUT=", c.timeout.count() / 1000.0, " s, FERRY_CHECK=", on(c.check),
             ", FERRY_BACKEND=", c.backend.empty() ? "(automatic)" : c.backend, ", FERRY_ALGO=",
             c.algo.empty() ? "(table)" : c.algo, ", FERRY_DEBUG=", c.debug,
             ", FERRY_DEBUG_SUBSYS=", c.debug_subsys.empty() ? "(all)" : c.debug_subsys,
             ", FERRY_HOST_CACHE_MB=", c.host_cache_mb, ", FERRY_HUGE_PAGES=", on(c.huge_pages),
             ", FERRY_PROGRESS_THREAD=", on(c.progress_thread), ", FERRY_MPI_PERSISTENT=",
             on(c.mpi_persistent), ", FERRY_MPI_EXCHANGE=", on(c.mpi_exchange),
             ", FERRY_SHM_PEER_READS=", on(c.shm_peer_reads), ", FERRY_UCX_CMA=", on(c.ucx_cma),
             ", FERRY_UCX_CMA_MIN_BYTES=",
             c.ucx_cma_min_bytes == 0 ? std::string("(default)")
                                      : std::to_string(c.ucx_cma_min_bytes),
             ", FERRY_UCX_ERROR_HANDLING=", c.ucx_peer_errors ? "peer" : "none",
             ", FERRY_STALL_WARN_S=",
             c.stall_warn.count() < 0    ? std::string("(auto)")
             : c.stall_warn.count() == 0 ? std::string("0 (off)")
                                         : std::to_string(c.stall_warn.count() / 1000.0),
             c.timeline.empty() ? "" : ", FERRY_TIMELINE=", c.timeline,
             c.rendezvous.empty() ? "" : ", FERRY_RENDEZVOUS=", c.rendezvous,
             c.secret.empty() ? "" : ", FERRY_SECRET=(set)");
}

}  // namespace detail
}  // namespace ferry
