// ferry-info: what this ferry is and how it would run here, in the manner of ucx_info / ucc_info:
// the version of the library and of the headers, what it was built with, the transports compiled
// in, the settings in effect (FERRY_* read the way the library reads them, and every FERRY_* and
// UCX_* variable set), and the algorithm table the engine chooses from. With --layout it joins
// the job instead (ferry::init, as any rank of it) and prints where its ranks run: the hosts,
// the ranks on each, and each rank's host and local rank.
#include <ferry/backends/rendezvous/launch_env.h>
#include <ferry/collectives/algorithm_table.h>
#include <ferry/collectives/engine/group_impl.h>
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/init.h>
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

#include <unistd.h>

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

// What the table gives `c` on this job's world, where its ranks run (the hierarchical
// algorithms for ranks on several hosts sharing some, shared memory on one host), at three
// sizes per rank's input.
void print_choice(const ferry::Group& world, const ferry::HostLayout& layout,
                  ferry::Collective c, const char* name) {
  const ferry::Placement placement = ferry::placement_of(layout);
  const bool native = world.impl().native() != nullptr;
  std::string line;
  for (size_t bytes : {size_t{8}, size_t{64} << 10, size_t{16} << 20}) {
    const ferry::Algorithm a = ferry::choose_algorithm(c, bytes, world.size(), native, placement);
    if (!line.empty()) line.append(", ");
    line.append(std::to_string(bytes < 1024 ? bytes : bytes >> 10));
    line.append(bytes < 1024 ? " B " : " KiB ").append(ferry::algorithm_name(a));
  }
  std::printf("%s on this world: %s\n", name, line.c_str());
}

// --layout: one rank of the job. Rank 0 prints the hosts (by index, with the host name its
// first rank reports) and the ranks on each; every rank then prints its own line, in rank order
// (a barrier between ranks' turns), flushed.
int print_layout() {
  ferry::Group world = ferry::init();
  const ferry::HostLayout layout = world.host_layout();
  constexpr int64_t kName = 64;
  ferry::Tensor mine = ferry::zeros({kName}, ferry::DType::UInt8);
  char name[kName] = {};
  (void)gethostname(name, kName - 1);
  std::memcpy(mine.data<uint8_t>(), name, std::strlen(name));
  ferry::Tensor all = ferry::zeros({kName * world.size()}, ferry::DType::UInt8);
  ferry::all_gather(mine, all, world).wait();
  const auto host_name = [&](int rank) {
    const char* p = reinterpret_cast<const char*>(all.data<uint8_t>()) + kName * rank;
    return std::string(p, strnlen(p, kName));
  };
  if (world.rank() == 0) {
    std::printf("layout: %d ranks on %d host%s (transport %s%s): %s\n", world.size(),
                layout.num_hosts(), layout.num_hosts() == 1 ? "" : "s",
                world.transport().name().c_str(), layout.known ? "" : ", one process",
                layout.describe().c_str());
    for (int h = 0; h < layout.num_hosts(); ++h) {
      const std::vector<int>& ranks = layout.hosts[static_cast<size_t>(h)];
      std::string list;
      for (int r : ranks) {
        if (!list.empty()) list.push_back(',');
        list.append(std::to_string(r));
      }
      std::printf("  host %d (%s): %zu rank%s: %s\n", h, host_name(ranks.front()).c_str(),
                  ranks.size(), ranks.size() == 1 ? "" : "s", list.c_str());
    }
    print_choice(world, layout, ferry::Collective::AllReduce, "all_reduce");
    print_choice(world, layout, ferry::Collective::ReduceScatter, "reduce_scatter");
    print_choice(world, layout, ferry::Collective::AllGather, "all_gather");
    std::fflush(stdout);
  }
  for (int r = 0; r < world.size(); ++r) {
    ferry::barrier(world).wait();
    if (r != world.rank()) continue;
    std::printf("rank %d: host %d (%s), local rank %d of %d\n", r, layout.host(),
                host_name(r).c_str(), layout.local_rank(), layout.local_size());
    std::fflush(stdout);
  }
  ferry::barrier(world).wait();
  ferry::finalize();
  return 0;
}

int run_main(int argc, char** argv) {
  bool algorithms = true, layout = false;
  ferry::cli::Parser("ferry-info", "[--no-algorithms] [--layout]",
                     "Prints this ferry's version, build, transports, settings in effect and\n"
                     "algorithm table. Exit status 0, or 1 when a FERRY_* variable is invalid.\n"
                     "With --layout, run as every rank of a job (mpiexec, ferry-run, torchrun,\n"
                     "srun), it prints where the job's ranks run instead: the hosts and the\n"
                     "ranks on each (rank 0), and each rank's host and local rank.")
      .flag("--no-algorithms", "leave out the algorithm table", [&] { algorithms = false; })
      .flag("--layout", "join the job and print its hosts and ranks per host",
            [&] { layout = true; })
      .parse(argc, argv);
  if (layout) return print_layout();

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
        {"FERRY_HUGE_PAGES", flag(c.huge_pages)},
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
