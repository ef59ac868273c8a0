// ferry-info: what this ferry is and how it would run here, in the manner of ucx_info / ucc_info:
// the version of the library and of the headers, what it was built with, the transports compiled
// in, the settings in effect (FERRY_* read the way the library reads them, and every FERRY_* and
// UCX_* variable set), and the algorithm table the engine chooses from.
#include <ferry/backends/rendezvous/launch_env.h>
#include <ferry/collectives/algorithm_table.h>
#include <ferry/runtime/build_info.h>
#include <ferry/runtime/config.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/version.h>
#include "tools/cli/args.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern char** environ;

namespace {

void print_environment(const char* prefix) {
  bool any = false;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, prefix, std::strlen(prefix)) != 0) continue;
    std::printf("  %s\n", *e);
    any = true;
  }
  if (!any) std::printf("  (none set)\n");
}

int run_main(int argc, char** argv) {
  bool algorithms = true;
  ferry::cli::Parser("ferry-info", "[--no-algorithms]",
                     "Prints this ferry's version, build, transports, settings in effect and\n"
                     "algorithm table. Exit status 0, or 1 when a FERRY_* variable is invalid.")
      .flag("--no-algorithms", "leave out the algorithm table", [&] { algorithms = false; })
      .parse(argc, argv);

  const ferry::BuildInfo& b = ferry::build_info();
  std::printf("ferry %s (library), headers %s\n", ferry::version(), FERRY_VERSION_STRING);
  std::printf("built with %s, buildtype %s\n", b.compiler.c_str(), b.build_type.c_str());
  std::string transports;
  for (const std::string& t : ferry::available_transports()) {
    if (!transports.empty()) transports.append(", ");
    transports.append(t);
    if (t == "mpi") transports.append(" (").append(b.mpi).append(")");
    if (t == "ucx") transports.append(" (").append(b.ucx).append(")");
  }
  std::printf("transports: %s\n", transports.c_str());

  std::printf("\nsettings in effect:\n");
  try {
    const ferry::Config& c = ferry::config();
    // Every documented setting, one unit style: seconds as "%g s", sizes with their unit.
    auto seconds = [](std::chrono::milliseconds ms) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%g s", static_cast<double>(ms.count()) / 1e3);
      return std::string(buf);
    };
    auto flag = [](bool b) { return std::string(b ? "1" : "0"); };
    auto or_else = [](const std::string& v, const char* unset) {
      return v.empty() ? std::string(unset) : v;
    };
    const auto stall = ferry::stall_warning_after(ferry::default_timeout());
    const std::vector<std::pair<std::string, std::string>> effective = {
        {"FERRY_TIMEOUT", seconds(c.timeout)},
        {"FERRY_CHECK", flag(c.check)},
        {"FERRY_ALGO", or_else(c.algo, "(automatic)")},
        {"FERRY_DEBUG", c.debug},
        {"FERRY_DEBUG_FILE", or_else(c.debug_file, "(stderr)")},
        {"FERRY_STALL_WARN_S", stall.count() == 0 ? std::string("0 (off)")
                                                  : seconds(stall) + (c.stall_warn.count() < 0
                                                                          ? " (automatic)"
                                                                          : "")},
        {"FERRY_TIMELINE", or_else(c.timeline, "(off)")},
        {"FERRY_DEBUG_SUBSYS", or_else(c.debug_subsys, "(all)")},
        {"FERRY_HOST_CACHE_MB", std::to_string(c.host_cache_mb) + " MiB"},
        {"FERRY_BACKEND", or_else(c.backend, "(automatic: mpi under mpiexec, else local)")},
        {"FERRY_MPI_PERSISTENT", flag(c.mpi_persistent)},
        {"FERRY_MPI_EXCHANGE", flag(c.mpi_exchange)},
        {"FERRY_PROGRESS_THREAD", flag(c.progress_thread)},
        {"FERRY_UCX_CMA", flag(c.ucx_cma)},
        {"FERRY_UCX_CMA_MIN_BYTES", c.ucx_cma_min_bytes == 0
                                        ? std::string("(the transport's: 65536 B)")
                                        : std::to_string(c.ucx_cma_min_bytes) + " B"},
        {"FERRY_UCX_ERROR_HANDLING", c.ucx_peer_errors ? "peer" : "none"},
        {"FERRY_RENDEZVOUS", or_else(c.rendezvous, "(unset)")},
        {"FERRY_RANK", or_else(c.rank, "(unset)")},
        {"FERRY_WORLD_SIZE", or_else(c.world_size, "(unset)")},
        {"FERRY_SECRET", c.secret.empty() ? "(unset)" : "(set)"},
        {"FERRY_RENDEZVOUS_BIND", or_else(c.rendezvous_bind, "(default: 127.0.0.1)")},
    };
    for (const auto& [name, value] : effective)
      std::printf("  %-25s %s\n", name.c_str(), value.c_str());
    // A setting added to the library but not above still shows, as given or by its default.
    for (const ferry::SettingInfo& s : ferry::known_settings()) {
      if (!s.documented) continue;
      bool shown = false;
      for (const auto& e : effective) shown = shown || e.first == s.name;
      if (shown) continue;
      const char* v = std::getenv(s.name);
      std::printf("  %-25s %s\n", s.name,
                  v != nullptr ? v : (std::string("(default: ") + s.fallback + ")").c_str());
    }
    const ferry::LaunchEnvironment launch = ferry::launch_environment();
    std::printf("  %-25s %s\n", "launcher", launch.describe().c_str());
  } catch (const ferry::Error& e) {
    std::fprintf(stderr, "ferry-info: %s\n", e.what());
    return 1;
  }
  std::printf("\nFERRY_* variables set:\n");
  print_environment("FERRY_");
  std::printf("\nUCX_* variables set (ucx_info -d lists the devices UCX sees):\n");
  print_environment("UCX_");

  if (algorithms) {
    std::printf("\nalgorithms:\n");
    try {
      std::fputs(ferry::algorithm_table().c_str(), stdout);
    } catch (const ferry::Error& e) {
      std::fprintf(stderr, "ferry-info: %s\n", e.what());
      return 1;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return ferry::cli::guarded_main("ferry-info", [&] { return run_main(argc, argv); });
}
