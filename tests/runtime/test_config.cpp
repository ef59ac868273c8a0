// The configuration module (runtime/config.h): one set of rules for every FERRY_* variable,
// bad values refused naming the variable, misspelt names warned about with the nearest known
// name, and docs/environment.md's table of variables checked against the module's list.
#include <ferry/collectives/algorithm_table.h>
#include <ferry/runtime/config.h>
#include <ferry/runtime/error.h>

#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

using ferry::Config;

Config parse(const std::map<std::string, std::string>& env) {
  return ferry::detail::read_config([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

std::string error_of(const std::map<std::string, std::string>& env) {
  try {
    parse(env);
  } catch (const ferry::InvalidArgument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("config: defaults when nothing is set", "[config]") {
  const Config c = parse({});
  CHECK(c.timeout == std::chrono::seconds(300));
  CHECK(c.debug == "off");
  CHECK_FALSE(c.check);
  CHECK(c.progress_thread);
  CHECK(c.mpi_persistent);
  CHECK(c.mpi_exchange);
  CHECK(c.ucx_cma);
  CHECK(c.ucx_peer_errors);
  CHECK(c.host_cache_mb == 256);
}

TEST_CASE("config: values are case-insensitive and booleans take six spellings", "[config]") {
  CHECK(parse({{"FERRY_DEBUG", "INFO"}}).debug == "info");
  CHECK(parse({{"FERRY_DEBUG", "Trace"}}).debug == "trace");
  CHECK(parse({{"FERRY_BACKEND", "UCX"}}).backend == "ucx");
  CHECK(parse({{"FERRY_UCX_ERROR_HANDLING", "None"}}).ucx_peer_errors == false);
  CHECK(parse({{"FERRY_DEBUG_SUBSYS", "COLL,Ucx"}}).debug_subsys == "coll,ucx");
  for (const char* yes : {"1", "true", "TRUE", "yes", "Yes", "on"})
    CHECK(parse({{"FERRY_CHECK", yes}}).check);
  for (const char* no : {"0", "false", "False", "no", "NO", "off"}) {
    CHECK_FALSE(parse({{"FERRY_MPI_PERSISTENT", no}}).mpi_persistent);
    CHECK_FALSE(parse({{"FERRY_UCX_CMA", no}}).ucx_cma);
  }
  CHECK(parse({{"FERRY_HOST_CACHE_MB", "0"}}).host_cache_mb == 0);
  CHECK(parse({}).huge_pages);
  CHECK_FALSE(parse({{"FERRY_HUGE_PAGES", "0"}}).huge_pages);
  CHECK(parse({{"FERRY_UCX_CMA_MIN_BYTES", "4096"}}).ucx_cma_min_bytes == 4096);
}

TEST_CASE("config: every bad value is refused naming the variable", "[config]") {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"FERRY_TIMEOUT", "inf"},          {"FERRY_TIMEOUT", "1e300"},
      {"FERRY_CHECK", "2"},              {"FERRY_CHECK", "maybe"},
      {"FERRY_DEBUG", "verbose"},        {"FERRY_DEBUG_SUBSYS", "coll,gpu"},
      {"FERRY_BACKEND", "nccl"},         {"FERRY_HOST_CACHE_MB", "-1"},
      {"FERRY_HOST_CACHE_MB", "12abc"},  {"FERRY_MPI_EXCHANGE", "y"},
      {"FERRY_PROGRESS_THREAD", "2"},    {"FERRY_UCX_CMA", "enable"},
      {"FERRY_UCX_CMA_MIN_BYTES", "100"}, {"FERRY_UCX_ERROR_HANDLING", "abort"},
  };
  for (const auto& [name, value] : bad) {
    INFO(name << "=" << value);
    const std::string msg = error_of({{name, value}});
    CHECK(msg.find(name) != std::string::npos);
    CHECK(msg.find("'" + value + "'") != std::string::npos);
  }
}

TEST_CASE("config: numbers are plain decimals; hex, inf, nan, blanks and signs are refused",
          "[config]") {
  CHECK(parse({{"FERRY_TIMEOUT", "300"}}).timeout == std::chrono::seconds(300));
  CHECK(parse({{"FERRY_TIMEOUT", "2.5"}}).timeout == std::chrono::milliseconds(2500));
  CHECK(parse({{"FERRY_TIMEOUT", "1e3"}}).timeout == std::chrono::seconds(1000));
  CHECK(parse({{"FERRY_TIMEOUT", "1E+3"}}).timeout == std::chrono::seconds(1000));
  CHECK(parse({{"FERRY_TIMEOUT", ".5"}}).timeout == std::chrono::milliseconds(500));
  CHECK(parse({{"FERRY_TIMEOUT", "0.001"}}).timeout == std::chrono::milliseconds(1));
  // Empty is unset, as for every variable: the default.
  CHECK(parse({{"FERRY_TIMEOUT", ""}}).timeout == std::chrono::seconds(300));
  CHECK(parse({{"FERRY_STALL_WARN_S", "0"}}).stall_warn == std::chrono::milliseconds::zero());
  CHECK(parse({{"FERRY_STALL_WARN_S", "0.0"}}).stall_warn == std::chrono::milliseconds::zero());
  CHECK(parse({{"FERRY_STALL_WARN_S", "30"}}).stall_warn == std::chrono::seconds(30));
  CHECK(parse({{"FERRY_HOST_CACHE_MB", "16"}}).host_cache_mb == 16);
  for (const char* name : {"FERRY_TIMEOUT", "FERRY_STALL_WARN_S"})
    for (const char* bad : {"0x10", "0X10", "0x1p4", "0x0", "inf", "-inf", "INF", "infinity",
                            "nan", "NaN", " 16", "16 ", "+16", "-16", "16s", "16\n", "1,5",
                            "1e", "e3", ".", "1e400", "1e-400", "1.2.3", "--1"}) {
      INFO(name << "=" << bad);
      const std::string msg = error_of({{name, bad}});
      CHECK(msg.find(name) != std::string::npos);
      CHECK(msg.find(std::string("given '") + bad + "'") != std::string::npos);
      CHECK(msg.find("decimal number of seconds") != std::string::npos);
    }
  CHECK(error_of({{"FERRY_STALL_WARN_S", "abc"}}).find("0 (off)") != std::string::npos);
  for (const char* name : {"FERRY_HOST_CACHE_MB", "FERRY_UCX_CMA_MIN_BYTES"})
    for (const char* bad : {"0x10000", "070000x", " 65536", "65536 ", "+65536", "-0", "1e5",
                            "65536.0", "inf"}) {
      INFO(name << "=" << bad);
      const std::string msg = error_of({{name, bad}});
      CHECK(msg.find(name) != std::string::npos);
      CHECK(msg.find(std::string("given '") + bad + "'") != std::string::npos);
      CHECK(msg.find("decimal digits") != std::string::npos);
    }
}

TEST_CASE("config: FERRY_ALGO gives each collective at most one algorithm", "[config]") {
  const ferry::Collective ar = ferry::Collective::AllReduce;
  ferry::set_algorithm_override("all_reduce:direct");
  try {
    ferry::set_algorithm_override("all_reduce:ring,all_reduce:recursive_doubling");
    FAIL("two algorithms for all_reduce were accepted");
  } catch (const ferry::InvalidArgument& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK(msg.find("'all_reduce:ring'") != std::string::npos);
    CHECK(msg.find("'all_reduce:recursive_doubling'") != std::string::npos);
  }
  // A refused spec changes nothing.
  CHECK(ferry::choose_algorithm(ar, 1 << 20, 4, false) == ferry::Algorithm::Direct);
  CHECK_THROWS_AS(
      ferry::set_algorithm_override("all_reduce:ring,broadcast:tree,all_reduce:direct"),
      ferry::InvalidArgument);
  // The same entry twice says nothing new and is accepted.
  ferry::set_algorithm_override("all_reduce:ring,broadcast:tree,all_reduce:ring");
  CHECK(ferry::choose_algorithm(ar, 1 << 20, 4, false) == ferry::Algorithm::Ring);
  ferry::set_algorithm_override("");
}

TEST_CASE("config: unknown FERRY_ names are reported with the nearest known one", "[config]") {
  std::vector<std::string> storage = {"FERRY_TIMEOUTS=3", "FERRY_CHEK=1", "FERRY_DEBUG=info",
                                      "PATH=/bin", "FERRY_UCX_CMA_MIN_BYTE=4096"};
  std::vector<char*> env;
  for (std::string& s : storage) env.push_back(s.data());
  env.push_back(nullptr);
  const auto unknown = ferry::detail::unknown_settings(env.data());
  REQUIRE(unknown.size() == 3);
  CHECK(unknown[0] == std::make_pair(std::string("FERRY_TIMEOUTS"), std::string("FERRY_TIMEOUT")));
  CHECK(unknown[1] == std::make_pair(std::string("FERRY_CHEK"), std::string("FERRY_CHECK")));
  CHECK(unknown[2].second == "FERRY_UCX_CMA_MIN_BYTES");
}

TEST_CASE("config: the effective settings are described (the secret is not)", "[config]") {
  const std::string d = ferry::detail::describe_settings(
      parse({{"FERRY_CHECK", "yes"}, {"FERRY_SECRET", "hunter2"}, {"FERRY_TIMEOUT", "2.5"}}));
  CHECK(d.find("FERRY_CHECK=1") != std::string::npos);
  CHECK(d.find("FERRY_TIMEOUT=2.5 s") != std::string::npos);
  CHECK(d.find("hunter2") == std::string::npos);
}

TEST_CASE("config: docs/environment.md's table lists exactly the known variables", "[config]") {
  std::ifstream page(FERRY_SOURCE_DIR "/docs/environment.md");
  REQUIRE(page.good());
  std::string line;
  bool in_section = false;
  std::set<std::string> listed;
  while (std::getline(page, line)) {
    if (line.rfind("## ", 0) == 0) in_section = line == "## Environment variables";
    if (!in_section || line.rfind("| `FERRY_", 0) != 0) continue;
    const size_t end = line.find('`', 3);
    listed.insert(line.substr(3, end - 3));
  }
  std::set<std::string> known;
  for (const ferry::SettingInfo& s : ferry::known_settings())
    if (s.documented) known.insert(s.name);
  for (const std::string& name : known) {
    INFO(name << " is a setting but not in docs/environment.md's table");
    CHECK(listed.count(name) == 1);
  }
  for (const std::string& name : listed) {
    INFO(name << " is in docs/environment.md's table but not a setting (runtime/config_parse.cpp)");
    CHECK(known.count(name) == 1);
  }
}

namespace {

// Sets FERRY_DEBUG for one scope and puts back what was there.
struct DebugSetting {
  explicit DebugSetting(const char* value) {
    if (const char* old = std::getenv("FERRY_DEBUG")) old_ = old, had_ = true;
    if (value) ::setenv("FERRY_DEBUG", value, 1);
    else ::unsetenv("FERRY_DEBUG");
  }
  ~DebugSetting() {
    if (had_) ::setenv("FERRY_DEBUG", old_.c_str(), 1);
    else ::unsetenv("FERRY_DEBUG");
  }
  std::string old_;
  bool had_ = false;
};

ferry::InvalidArgument raised() {
  try {
    FERRY_THROW(ferry::InvalidArgument, "all_reduce: count ", 3, " expected, ", 4, " given");
  } catch (const ferry::InvalidArgument& e) {
    return e;
  }
  throw std::logic_error("FERRY_THROW did not throw");
}

}  // namespace

TEST_CASE("errors: the message reads clean; the source line only under FERRY_DEBUG or on request",
          "[errors]") {
  for (const char* quiet : {static_cast<const char*>(nullptr), "off", "OFF"}) {
    DebugSetting d(quiet);
    const ferry::InvalidArgument e = raised();
    CHECK(std::string(e.what()) == "ferry: all_reduce: count 3 expected, 4 given");
    CHECK(e.where().rfind("tests/runtime/test_config.cpp:", 0) == 0);
    CHECK(e.what_with_location() == std::string(e.what()) + " [" + e.where() + "]");
  }
  for (const char* loud : {"warn", "info", "TRACE"}) {
    DebugSetting d(loud);
    const ferry::InvalidArgument e = raised();
    CHECK(std::string(e.what()) == "ferry: all_reduce: count 3 expected, 4 given [" + e.where() + "]");
    CHECK(e.what_with_location() == e.what());  // not appended twice
  }
  SECTION("a prefix added on the way keeps the type and the location") {
    DebugSetting d(nullptr);
    const ferry::InvalidArgument first = raised();
    try {
      ferry::rethrow_with_prefix(std::make_exception_ptr(first), "rank 1: ");
    } catch (const ferry::InvalidArgument& e) {
      CHECK(std::string(e.what()) == "rank 1: ferry: all_reduce: count 3 expected, 4 given");
      CHECK(e.where() == first.where());
    }
  }
  SECTION("an error built by hand has no location") {
    const ferry::Error e("plain");
    CHECK(e.where().empty());
    CHECK(e.what_with_location() == "plain");
  }
}
