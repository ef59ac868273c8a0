#include <ferry/backends/rendezvous/launch_env.h>

#include <ferry/runtime/error.h>

#include <cstdlib>
#include <string>

namespace ferry {
namespace detail {
namespace {

using Getenv = std::function<const char*(const char*)>;

std::string text(const Getenv& get, const char* name) {
  const char* v = get(name);
  return v == nullptr ? std::string() : std::string(v);
}

int number(const Getenv& get, const char* name, int lo, int hi) {
  const std::string v = text(get, name);
  char* end = nullptr;
  const long x = std::strtol(v.c_str(), &end, 10);
  FERRY_CHECK(!v.empty() && end != v.c_str() && *end == '\0' && x >= lo && x <= hi,
              InvalidArgument, name, ": expected an integer from ", lo, " to ", hi, ", given '",
              v, "'");
  return static_cast<int>(x);
}

bool is_true(const std::string& v) {
  return v == "1" || v == "true" || v == "True" || v == "TRUE" || v == "yes";
}

// `size_name`/`rank_name` both set: the launcher's rank and size, checked against each other.
bool take(const Getenv& get, const char* launcher, const char* rank_name, const char* size_name,
          LaunchEnvironment& e) {
  if (text(get, rank_name).empty() || text(get, size_name).empty()) return false;
  e.launcher = launcher;
  e.world_size = number(get, size_name, 1, 1 << 20);
  e.rank = number(get, rank_name, 0, e.world_size - 1);
  return true;
}

void local_rank(const Getenv& get, const char* name, LaunchEnvironment& e) {
  if (!text(get, name).empty()) e.local_rank = number(get, name, 0, e.world_size - 1);
}

// "host:port" or "[v6]:port" into e.host / e.port.
void address(const std::string& variable, const std::string& where, LaunchEnvironment& e) {
  const size_t colon = where.rfind(':');
  FERRY_CHECK(colon != std::string::npos && colon > 0, InvalidArgument, variable,
              ": expected host:port, given '", where, "'");
  std::string host = where.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  const std::string port = where.substr(colon + 1);
  char* end = nullptr;
  const long p = std::strtol(port.c_str(), &end, 10);
  FERRY_CHECK(end != port.c_str() && *end == '\0' && p > 0 && p < 65536, InvalidArgument,
              variable, ": expected a port from 1 to 65535 after the colon, given '", where, "'");
  e.host = host;
  e.port = static_cast<int>(p);
}

void master_port(const Getenv& get, int offset, LaunchEnvironment& e) {
  if (text(get, "MASTER_PORT").empty()) return;
  e.port = number(get, "MASTER_PORT", 1, 65535 - offset) + offset;
}

}  // namespace

std::string first_slurm_host(const std::string& nodelist) {
  // The first entry ends at a comma outside brackets; a bracket holds ranges of numbers whose
  // first one (with its zero padding) names the first host.
  std::string first;
  int depth = 0;
  for (char c : nodelist) {
    if (c == ',' && depth == 0) break;
    if (c == '[') ++depth;
    if (c == ']') --depth;
    first += c;
  }
  const size_t open = first.find('[');
  if (open == std::string::npos) return first;
  const size_t stop = first.find_first_of(",-]", open + 1);
  FERRY_CHECK(stop != std::string::npos, InvalidArgument,
              "SLURM node list: expected name[ranges], given '", nodelist, "'");
  return first.substr(0, open) + first.substr(open + 1, stop - open - 1);
}

LaunchEnvironment read_launch_environment(const Getenv& get) {
  LaunchEnvironment e;
  if (take(get, "ferry", "FERRY_RANK", "FERRY_WORLD_SIZE", e)) {
    local_rank(get, "LOCAL_RANK", e);
    if (!text(get, "FERRY_RENDEZVOUS").empty())
      address("FERRY_RENDEZVOUS", text(get, "FERRY_RENDEZVOUS"), e);
  } else if (take(get, "torchrun", "RANK", "WORLD_SIZE", e)) {
    local_rank(get, "LOCAL_RANK", e);
    e.host = text(get, "MASTER_ADDR");
    master_port(get, is_true(text(get, "TORCHELASTIC_USE_AGENT_STORE")) ? 1 : 0, e);
  } else if (take(get, "slurm", "SLURM_PROCID", "SLURM_NTASKS", e)) {
    local_rank(get, "SLURM_LOCALID", e);
    e.host = text(get, "MASTER_ADDR");
    for (const char* list : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"})
      if (e.host.empty() && !text(get, list).empty()) e.host = first_slurm_host(text(get, list));
    master_port(get, 0, e);
  } else if (take(get, "mpi", "PMI_RANK", "PMI_SIZE", e)) {
    local_rank(get, "MPI_LOCALRANKID", e);
  } else if (take(get, "mpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", e)) {
    local_rank(get, "OMPI_COMM_WORLD_LOCAL_RANK", e);
  }
  // FERRY_RENDEZVOUS names rank 0's address whichever launcher gave the ranks.
  if (e.launcher != "ferry" && !text(get, "FERRY_RENDEZVOUS").empty())
    address("FERRY_RENDEZVOUS", text(get, "FERRY_RENDEZVOUS"), e);
  return e;
}

}  // namespace detail

std::string LaunchEnvironment::describe() const {
  std::string s = (launcher.empty() ? std::string("no launcher") : launcher) + ": rank " +
                  std::to_string(rank) + " of " + std::to_string(world_size) + " (local " +
                  std::to_string(local_rank) + ")";
  if (!host.empty() || port != 0)
    s += ", rank 0 at " + (host.empty() ? std::string("?") : host) + ":" +
         (port == 0 ? std::string("?") : std::to_string(port));
  return s;
}

LaunchEnvironment launch_environment() {
  return detail::read_launch_environment([](const char* name) -> const char* {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0' ? v : nullptr;
  });
}

}  // namespace ferry
