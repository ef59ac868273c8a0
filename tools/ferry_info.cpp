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

#include <cstdio>
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
    std::printf("  FERRY_TIMEOUT          %.3f s\n", static_cast<double>(c.timeout.count()) / 1e3);
    std::printf("  FERRY_BACKEND          %s\n", c.backend.empty()
                                                    ? "(automatic: mpi under mpiexec, else local)"
                                                    : c.backend.c_str());
    std::printf("  FERRY_ALGO             %s\n", c.algo.empty() ? "(automatic)" : c.algo.c_str());
    std::printf("  FERRY_DEBUG            %s\n", c.debug.c_str());
    std::printf("  FERRY_DEBUG_SUBSYS     %s\n",
                c.debug_subsys.empty() ? "(all)" : c.debug_subsys.c_str());
    std::printf("  FERRY_PROGRESS_THREAD  %d\n", c.progress_thread ? 1 : 0);
    const auto stall = ferry::stall_warning_after(ferry::default_timeout());
    std::printf("  FERRY_STALL_WARN_S     %s\n",
                stall.count() == 0 ? "0 (off)"
                                   : (std::to_string(static_cast<double>(stall.count()) / 1e3) +
                                      " s" + (c.stall_warn.count() < 0 ? " (automatic)" : ""))
                                         .c_str());
    std::printf("  FERRY_TIMELINE         %s\n", c.timeline.empty() ? "(off)" : c.timeline.c_str());
    const ferry::LaunchEnvironment launch = ferry::launch_environment();
    std::printf("  launcher               %s\n", launch.describe().c_str());
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
