#include <ferry/collectives/init.h>

#include <ferry/backends/local/local_transport.h>
#include <ferry/backends/mpi_bootstrap.h>
#include <ferry/backends/rendezvous/tcp_rendezvous.h>
#include <ferry/backends/ucx_bootstrap.h>
#include <ferry/backends/world_handshake.h>
#include <ferry/collectives/algorithm_table.h>
#include <ferry/collectives/engine/group_impl.h>
#include <ferry/runtime/config.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/log.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace ferry {
namespace {

struct InitState {
  std::mutex mu;
  Group world;
  std::string backend;
  bool finalized = false;
  bool mpi_started = false;  // mpi, or ucx bootstrapped through MPI: finalize MPI at the end
  bool at_exit_registered = false;
  int exit_status = -1;  // the status exit() was given, once the process exits; -1 before
};

InitState& state() {
  static auto* s = new InitState();  // never destroyed: finalize() may run from atexit
  return *s;
}

// How long a rank whose world failed waits for its finalize notices to leave.
constexpr auto kNotifyWait = std::chrono::seconds(1);

// The launcher that started this process, if it is an MPI one ("" otherwise).
std::string mpi_launcher_hint() {
  for (const char* name : {"PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE"}) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0') return name;
  }
  return "";
}

// At exit nothing can catch: the error is printed, and the process still ends. glibc's on_exit
// hands over the status exit() was given: should MPI_Finalize have to be cut short, the process
// still ends with the program's own status.
void finalize_at_exit(int status, void*) {
  state().exit_status = status;
  try {
    finalize();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ferry: finalize at exit failed: %s\n", e.what());
  }
}

}  // namespace

Group init() { return init(InitOptions{}); }

Group init(const InitOptions& options) {
  InitState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.world.valid()) return s.world;
  FERRY_CHECK(!s.finalized, InvalidArgument, "ferry::init: called after ferry::finalize()");
  // Every FERRY_* variable is read (and a bad value refused) here, before anything starts.
  std::string backend = !options.backend.empty() ? options.backend : config().backend;
  FERRY_LOG(Info, "init", "settings: ", detail::describe_settings(config()));
  detail::load_algorithm_overrides();  // FERRY_ALGO's collectives and algorithms
  if (options.timeout.count() != 0) set_default_timeout(options.timeout);
  const bool rendezvous_given =
      options.rank >= 0 || options.world_size > 0 || !options.rendezvous.empty();
  const LaunchEnvironment launch = launch_environment();
  std::string why = (!options.backend.empty() ? "InitOptions::backend=" : "FERRY_BACKEND=") +
                    backend;
  if (backend.empty()) {
    const std::string hint = mpi_launcher_hint();
    if (rendezvous_given) {
      backend = "ucx";
      why = "InitOptions names a TCP rendezvous";
    } else if (hint.empty() && launch.world_size > 1 && launch.launcher != "mpi") {
      // torchrun, srun without MPI, or ferry-run's variables: several processes that must
      // meet; a world of one each would train N unrelated models.
      backend = "ucx";
      why = launch.describe() + ", no MPI launcher";
    } else {
      backend = hint.empty() ? "local" : "mpi";
      why = hint.empty() ? "no launcher in the environment" : hint + " is set (an MPI launcher)";
    }
    FERRY_CHECK(hint.empty() || backend != "mpi" || detail::mpi_built(), TransportError,
                "ferry::init: ", why,
                ", but this ferry was built without MPI; rebuild with MPI (libmpich-dev) or set "
                "FERRY_BACKEND=local to run every process as a world of its own");
  }
  FERRY_CHECK(!rendezvous_given || backend == "ucx", InvalidArgument,
              "ferry::init: InitOptions::rank / world_size / rendezvous describe the TCP "
              "rendezvous, which only the ucx backend uses; given backend '", backend, "'");
  std::shared_ptr<Transport> transport;
  if (backend == "mpi") {
    transport = detail::mpi_world_transport();
    s.mpi_started = true;
  } else if (backend == "local") {
    transport = make_local_world(1)[0];
  } else if (backend == "ucx") {
    // The rendezvous when asked for (options, FERRY_RENDEZVOUS, or a non-MPI launcher's
    // address), else MPI's launcher.
    const bool launcher_rendezvous = launch.world_size > 1 && launch.launcher != "mpi";
    const bool through_mpi =
        !rendezvous_given && config().rendezvous.empty() && !launcher_rendezvous;
    FERRY_CHECK(!through_mpi || !mpi_launcher_hint().empty(), InvalidArgument,
                "ferry::init: FERRY_BACKEND=ucx needs either an MPI launcher (mpiexec) or the TCP "
                "rendezvous (FERRY_RENDEZVOUS=host:port, FERRY_RANK, FERRY_WORLD_SIZE, "
                "FERRY_SECRET; or torchrun's / SLURM's variables; or InitOptions)");
    if (through_mpi) {
      transport = detail::ucx_world_transport(true);
    } else {
      const RendezvousOptions ro = rendezvous_options(
          {options.rendezvous, options.rank, options.world_size, options.secret, options.bind});
      transport = detail::ucx_world_transport(false, &ro);
    }
    s.mpi_started = through_mpi;
    why += through_mpi ? ", addresses through MPI" : ", addresses through the TCP rendezvous";
  } else {
    FERRY_THROW(InvalidArgument, "ferry::init: FERRY_BACKEND must be mpi, ucx or local, given '",
                backend, "'");
  }
  if (backend != "local" && !s.at_exit_registered) {
    on_exit(finalize_at_exit, nullptr);
    s.at_exit_registered = true;
  }
  if (transport->size() > 1) detail::set_process_log_rank(transport->rank());
  FERRY_LOG(Info, "init", "backend ", backend, " (", why, "): rank ", transport->rank(), " of ",
            transport->size());
  Group world = Group::world(transport);
  // init is a barrier on a wired-up world: once it returns, a peer's end is a clean finalize
  // or an ordinary peer failure, never a connection that fails while being set up.
  detail::world_handshake(world.transport(), detail::Handshake::Open,
                          Clock::now() + default_timeout());
  // From here on, a peer that enters finalize is known at once to every rank still waiting in
  // a collective it never issued (world_handshake.h).
  if (world.size() > 1) detail::set_close_watch(std::make_shared<detail::CloseWatch>(transport));
  s.world = std::move(world);
  s.backend = backend;
  return s.world;
}

std::string backend_name() {
  InitState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.backend;
}

void finalize() {
  InitState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.finalized) return;
  s.finalized = true;
  std::exception_ptr error;
  bool closed = false;
  if (s.world.valid()) {
    try {
      // Nothing may be left in flight for the transport's end: every group's started and
      // queued ops finish first (dropped Works too), each under its own deadline.
      detail::finish_every_group();
      const std::vector<detail::GroupProgress> progress =
          detail::group_progress(s.world.transport());
      if (auto watch = detail::close_watch()) {
        if (!s.world.poisoned()) {
          const std::string out_of_step = watch->close(progress, Clock::now() + default_timeout());
          s.world.transport().peers_closing();
          // A peer whose world failed skipped the handshake and only told us that it ended:
          // the job ends as after a failure on every rank alike.
          closed = !watch->peer_world_failed();
          // The handshake itself completed: the transport closes as usual, then this raises.
          if (!out_of_step.empty()) {
            error = std::make_exception_ptr(
                MismatchError(detail::str("ferry::finalize on rank ", s.world.rank(), " of ",
                                          s.world.size(), ": ", out_of_step)));
          }
        } else {
          // No handshake with a failed world, but the peers still learn that this rank ended
          // (one waiting in finalize's handshake, or in a collective, for it ends at once).
          watch->notify(progress, Clock::now() + kNotifyWait);
        }
      } else {
        closed = !s.world.poisoned();  // a world of one rank: no peer to hear from
      }
    } catch (...) {
      error = std::current_exception();
    }
  }
  // Its receives are withdrawn while the transport still works.
  detail::set_close_watch(nullptr);
  // The world group's worker and communicators go next, while MPI still works.
  s.world = Group();
  if (s.mpi_started) detail::mpi_finalize(/*peers_closed=*/closed, s.exit_status);
  if (error) std::rethrow_exception(error);
}

}  // namespace ferry
