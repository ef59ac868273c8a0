#include <ferry/collectives/torchrec/utils/topology.h>

#include <ferry/collectives/torchrec/utils/format.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/log.h>

#include <charconv>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <system_error>

namespace ferry::torchrec {

namespace {

constexpr const char* kLocalSizeVars[] = {"LOCAL_WORLD_SIZE", "MPI_LOCALNRANKS",
                                          "OMPI_COMM_WORLD_LOCAL_SIZE",
                                          "MV2_COMM_WORLD_LOCAL_SIZE"};
constexpr const char* kLocalRankVars[] = {"LOCAL_RANK", "MPI_LOCALRANKID",
                                          "OMPI_COMM_WORLD_LOCAL_RANK",
                                          "MV2_COMM_WORLD_LOCAL_RANK"};

// The integer in `name`'s value (surrounding blanks and a leading '+' allowed, as Python's int()
// allows them), or nullopt when unset.
std::optional<long long> env_int(const char* name) {
  const char* raw = std::getenv(name);
  if (raw == nullptr) return std::nullopt;
  std::string_view v(raw);
  const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!v.empty() && blank(v.front())) v.remove_prefix(1);
  while (!v.empty() && blank(v.back())) v.remove_suffix(1);
  std::string_view digits = v;
  if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
  long long value = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  FERRY_CHECK(!digits.empty() && ec != std::errc::invalid_argument &&
                  end == digits.data() + digits.size() && (digits.front() != '-' || v == digits),
              InvalidArgument, "torchrec topology: environment variable ", name, "=\"", raw,
              "\" is not an integer");
  FERRY_CHECK(ec != std::errc::result_out_of_range && value <= 1'000'000'000, InvalidArgument,
              "torchrec topology: environment variable ", name, "=\"", raw,
              "\" is out of range");
  return value;
}

// The first non-negative value among `names`, with the variable it came from.
template <size_t N>
std::optional<std::pair<int, const char*>> first_non_negative(const char* const (&names)[N]) {
  for (const char* name : names) {
    const std::optional<long long> v = env_int(name);
    if (v && *v >= 0) return std::make_pair(static_cast<int>(*v), name);
  }
  return std::nullopt;
}

void check_world_size(int world_size, const char* fn) {
  FERRY_CHECK(world_size >= 1, InvalidArgument, "torchrec ", fn,
              ": the world size must be >= 1, given ", world_size);
}

void check_rank(int world_size, int rank, const char* fn) {
  check_world_size(world_size, fn);
  FERRY_CHECK(rank >= 0 && rank < world_size, InvalidArgument, "torchrec ", fn, ": rank ", rank,
              " is not in [0, ", world_size, ")");
}

void check_member(const Group& world, const char* fn) {
  detail::check_group(world, (std::string("torchrec ") + fn).c_str());
}

// The hosts of `group`'s members when the job knows them (host keys exchanged at init: MPI,
// UCX), else nullopt (the local transport, whose ranks are threads of one process and whose
// tests give the node layout through the launcher variables). On the world group (every rank of
// the transport) the launcher's variables, where set, must agree with it: they describe the
// world's hosts, and a sub-group's hosts hold fewer of its ranks.
std::optional<HostLayout> job_hosts(const Group& group, const char* fn) {
  HostLayout layout = group.host_layout();
  if (!layout.known) return std::nullopt;
  if (group.size() != group.transport().size()) return layout;
  const auto says = [&](const char* what, const std::optional<std::pair<int, const char*>>& var,
                        int job) {
    if (!var || var->first == job) return;
    FERRY_THROW(InvalidArgument, "torchrec ", detail::where(fn, group), ": the launcher's ",
                var->second, "=", var->first, " disagrees with where the ranks run: the job's "
                "hosts (learnt at init from every rank's host key) give this rank ", what, " ", job,
                " (", layout.describe(), "); the launcher started the ranks on other hosts than "
                "it says, or the variable was set by hand");
  };
  says("local size", first_non_negative(kLocalSizeVars), layout.local_size());
  says("local rank", first_non_negative(kLocalRankVars), layout.local_rank());
  return layout;
}

// The one local size of a job whose hosts are known: torchrec's node groups (and the sharding
// types built on them) take host g to hold ranks g*L .. g*L+L-1.
int uniform_local_size(const Group& group, const HostLayout& layout, const char* fn) {
  FERRY_CHECK(layout.uniform(), InvalidArgument, "torchrec ", detail::where(fn, group),
              ": the hosts hold different numbers of ranks (", layout.describe(),
              "); torchrec's node groups need the same number on every host: give the local "
              "size explicitly, or use Group::host_layout() for each host's own");
  FERRY_CHECK(layout.contiguous(), InvalidArgument, "torchrec ", detail::where(fn, group),
              ": a host's ranks are not consecutive (", layout.describe(),
              "); torchrec's node groups take host g to hold ranks g*L .. g*L+L-1: start the "
              "ranks host by host (mpiexec fills each host of -hosts in turn)");
  return layout.local_size();
}

}  // namespace

std::optional<std::pair<int, const char*>> launcher_local_size() {
  const auto found = first_non_negative(kLocalSizeVars);
  FERRY_CHECK(!found || found->first != 0, InvalidArgument,
              "torchrec get_local_size: environment variable ", found->second,
              "=0 is not a valid number of ranks per node");
  return found;
}

int get_local_size(int world_size) {
  check_world_size(world_size, "get_local_size");
  const auto found = launcher_local_size();
  const int local_size = found ? found->first : kDefaultLocalSize;
  if (world_size % local_size != 0) {
    FERRY_LOG(Info, "torchrec", "get_local_size: warning: local size ", local_size, " (",
              found ? found->second : "the default", ") does not divide the world size ",
              world_size, "; using the world size (one node)");
    return world_size;
  }
  return local_size;
}

int get_local_rank(int world_size, int rank) {
  check_rank(world_size, rank, "get_local_rank");
  const int local_size = get_local_size(world_size);
  const auto found = first_non_negative(kLocalRankVars);
  if (found && found->first < local_size) return found->first;
  if (found) {
    FERRY_LOG(Info, "torchrec", "get_local_rank: warning: ", found->second, "=", found->first,
              " is not below the local size ", local_size, "; using rank % local size");
  }
  return rank % local_size;
}

int get_group_rank(int world_size, int rank) {
  check_rank(world_size, rank, "get_group_rank");
  return rank / get_local_size(world_size);
}

int get_num_groups(int world_size) { return world_size / get_local_size(world_size); }

int get_local_size(const Group& world) {
  check_member(world, "get_local_size");
  if (const auto hosts = job_hosts(world, "get_local_size"))
    return uniform_local_size(world, *hosts, "get_local_size");
  return get_local_size(world.size());
}
int get_local_rank(const Group& world) {
  check_member(world, "get_local_rank");
  if (const auto hosts = job_hosts(world, "get_local_rank")) return hosts->local_rank();
  return get_local_rank(world.size(), world.rank());
}
int get_group_rank(const Group& world) {
  check_member(world, "get_group_rank");
  if (const auto hosts = job_hosts(world, "get_group_rank")) return hosts->host();
  return get_group_rank(world.size(), world.rank());
}
int get_num_groups(const Group& world) {
  check_member(world, "get_num_groups");
  if (const auto hosts = job_hosts(world, "get_num_groups")) return hosts->num_hosts();
  return get_num_groups(world.size());
}

namespace {

// The (intra, cross) pairs made so far, per world group (compared by owner, so an entry is never
// confused with a later group that reuses an address) and local size. Shared by every thread of
// the process: ranks of the local transport are threads, each with its own world state.
struct NodeGroupCache {
  struct Key {
    std::weak_ptr<ferry::detail::GroupImpl> world;
    int local_size;
    bool operator<(const Key& o) const {
      std::owner_less<std::weak_ptr<ferry::detail::GroupImpl>> less;
      if (less(world, o.world)) return true;
      if (less(o.world, world)) return false;
      return local_size < o.local_size;
    }
  };
  std::mutex mu;
  std::map<Key, std::pair<Group, Group>> pairs;
};

NodeGroupCache& cache() {
  static NodeGroupCache c;
  return c;
}

}  // namespace

std::pair<Group, Group> intra_and_cross_node_pg(const Group& world, int local_size) {
  if (!world.valid()) return {Group(), Group()};
  const int w = world.size();
  const int r = world.rank();
  // By the job's hosts when it knows them and none was given: node g is the g-th host (by its
  // first rank), also when hosts hold different numbers of ranks or their ranks are not
  // consecutive (local size 0 in the cache key: "by hosts"); on hosts of L consecutive ranks
  // each, the same groups as local size L.
  std::optional<HostLayout> hosts;
  if (local_size == 0 && (hosts = job_hosts(world, "intra_and_cross_node_pg"))) {
    if (hosts->uniform() && hosts->contiguous()) {
      local_size = hosts->local_size();
      hosts.reset();
    }
  }
  if (hosts) {
    // (the cache key's local size stays 0)
  } else if (local_size == 0) {
    local_size = get_local_size(w);
  } else {
    FERRY_CHECK(local_size >= 1 && w % local_size == 0, InvalidArgument,
                "torchrec ", detail::where("intra_and_cross_node_pg", world),
                ": local size ", local_size, " must be >= 1 and divide the group size ", w);
  }
  const NodeGroupCache::Key key{world.weak_impl(), local_size};
  {
    std::lock_guard<std::mutex> lock(cache().mu);
    for (auto it = cache().pairs.begin(); it != cache().pairs.end();) {
      it = it->first.world.expired() ? cache().pairs.erase(it) : std::next(it);
    }
    const auto it = cache().pairs.find(key);
    if (it != cache().pairs.end()) return it->second;
  }
  // Not under the lock: the splits are collective, and the other ranks of a local world are
  // threads of this process that need the cache meanwhile.
  Group intra = world.split(/*color=*/hosts ? hosts->host() : r / local_size, /*key=*/r);
  Group cross = world.split(/*color=*/hosts ? hosts->local_rank() : r % local_size, /*key=*/r);
  FERRY_LOG(Info, "torchrec", "intra_and_cross_node_pg: ", world.describe(),
            hosts ? " by hosts (" + hosts->describe() + ")"
                  : ferry::detail::str(" local size ", local_size),
            ": intra ", intra.describe(), ", cross ", cross.describe());
  std::lock_guard<std::mutex> lock(cache().mu);
  // Only this rank's thread uses this key, so nothing can have filled it meanwhile unless the
  // caller raced two calls on one group (itself an ordering error); keep the first then.
  return cache().pairs.emplace(key, std::make_pair(intra, cross)).first->second;
}

}  // namespace ferry::torchrec
