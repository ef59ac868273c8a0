#include <ferry/collectives/group.h>

#include <ferry/backends/world_handshake.h>
#include <ferry/collectives/algorithm_table.h>
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/engine/group_impl.h>
#include <ferry/collectives/shm/shm_ops.h>
#include <ferry/runtime/config.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/log.h>

#include <algorithm>
#include <numeric>
#include <tuple>

namespace ferry {

Group Group::world(std::shared_ptr<Transport> transport) {
  FERRY_CHECK(transport != nullptr, InvalidArgument, "Group::world: transport is null");
  std::vector<int> members(transport->size());
  std::iota(members.begin(), members.end(), 0);
  int rank = transport->rank();
  std::shared_ptr<NativeCollectives> native = transport->native_world();
  // Which ranks share a host, for the shared-memory path (world_handshake.h): learnt now, as
  // making the world group is collective (after native_world, which gives MPI's world group
  // its communicators). Only MPI's and UCX's ranks are processes that may share a host; the
  // local transport's are threads of one process (and a test's scripted transport answers
  // only the messages it was written for).
  if (transport->name() == "mpi" || transport->name() == "ucx") {
    // One rank per process: its log lines and FERRY_TIMELINE's %r name it from here on, also
    // where the program made the transport itself (make_mpi_transport) instead of ferry::init.
    if (transport->size() > 1) detail::set_process_log_rank(rank);
    detail::exchange_host_keys(*transport, Clock::now() + default_timeout());
  }
  // FERRY_ALGO naming a way of the transport's own collectives where it has none stops here,
  // at init, rather than at the first op of that collective.
  detail::check_algorithm_overrides(native != nullptr, transport->name());
  // The table once per job (rank 0), not once per rank.
  if (rank == 0)
    FERRY_LOG(Info, "init", "world group on transport ", transport->name(), ": rank ", rank,
              " of ", transport->size(), native ? "; collectives of its own: " : "",
              native ? native->name() : "", "; algorithms:\n", algorithm_table());
  else
    FERRY_LOG(Info, "init", "world group on transport ", transport->name(), ": rank ", rank,
              " of ", transport->size(), " (rank 0 prints the algorithm table)");
  Group world(detail::make_group_impl(std::move(transport), std::move(members), rank, /*id=*/0,
                                       std::move(native)));
  // Where the ranks run, once per job (rank 0) and per rank (its host and local rank), from
  // the keys just exchanged.
  if (log_enabled(LogLevel::Info, "init") && world.size() > 1) {
    const HostLayout layout = world.host_layout();
    if (rank == 0) FERRY_LOG(Info, "init", "hosts: ", layout.describe());
    FERRY_LOG(Info, "init", "rank ", rank, ": host ", layout.host(), " of ", layout.num_hosts(),
              ", local rank ", layout.local_rank(), " of ", layout.local_size());
  }
  detail::shm::prepare_group(world.impl());  // ranks on one host: the group's shared segment
  return world;
}

detail::GroupImpl& Group::impl() const {
  FERRY_CHECK(impl_ != nullptr, InvalidArgument,
              "use of a null Group (a rank that split with kUndefinedColor gets one)");
  return *impl_;
}

int Group::rank() const { return impl().rank(); }
int Group::size() const { return impl().size(); }
uint32_t Group::id() const { return impl().id(); }
uint64_t Group::sequence_number() const { return impl().sequence_number(); }
const std::vector<int>& Group::members() const { return impl().members(); }
Transport& Group::transport() const { return impl().transport(); }
bool Group::poisoned() const { return impl().poisoned(); }
std::string Group::poison_reason() const { return impl().poison_reason(); }
std::string Group::describe() const { return valid() ? impl().describe() : "null group"; }

int Group::world_rank(int group_rank) const {
  FERRY_CHECK(group_rank >= 0 && group_rank < size(), InvalidArgument, "Group::world_rank on ",
              describe(), ": rank must be in [0, ", size(), "), given ", group_rank);
  return members()[group_rank];
}

Group Group::split(int color, int key) const {
  detail::GroupImpl& parent = impl();
  FERRY_CHECK(color >= 0 || color == kUndefinedColor, InvalidArgument, "Group::split on rank ",
              rank(), " of ", describe(), ": color must be >= 0 or kUndefinedColor, given ",
              color);
  // Everyone learns everyone's (color, key, proposed id) with one all_gather on the parent.
  const int n = size();
  Tensor mine = from_vector<int64_t>(
      {color, key, static_cast<int64_t>(parent.transport().propose_group_id())});
  Tensor all = empty({3 * static_cast<int64_t>(n)}, DType::Int64);
  all_gather(mine, all, *this).wait();
  const int64_t* v = all.data<int64_t>();

  uint32_t id = 0;
  for (int r = 0; r < n; ++r) id = std::max<uint32_t>(id, static_cast<uint32_t>(v[3 * r + 2]));
  parent.transport().adopt_group_id(id);
  // The transport's own sub-communicator: every member takes part (the all_gather above proved
  // they are all here), undefined colors included.
  std::shared_ptr<NativeCollectives> native =
      parent.native() ? parent.native()->split(color, key, id) : nullptr;
  if (color == kUndefinedColor) return Group();

  std::vector<std::tuple<int64_t, int, int>> chosen;  // (key, parent rank, world rank)
  for (int r = 0; r < n; ++r)
    if (v[3 * r] == color) chosen.emplace_back(v[3 * r + 1], r, parent.members()[r]);
  std::sort(chosen.begin(), chosen.end());
  std::vector<int> members;
  int my_rank = -1;
  for (const auto& [k, parent_rank, world] : chosen) {
    if (parent_rank == rank()) my_rank = static_cast<int>(members.size());
    members.push_back(world);
  }
  Group group(detail::make_group_impl(parent.transport_ptr(), std::move(members), my_rank, id,
                                       std::move(native)));
  detail::shm::prepare_group(group.impl());  // ranks on one host: the group's shared segment
  return group;
}

HostLayout Group::host_layout() const { return detail::host_layout_of(impl()); }

HostLayout detail::host_layout_of(const GroupImpl& g) {
  const std::vector<int>& members = g.members();
  const Transport& transport = g.transport();
  HostLayout layout;
  layout.rank = g.rank();
  layout.host_of.resize(members.size());
  std::vector<uint64_t> keys;  // by host
  for (size_t r = 0; r < members.size(); ++r) {
    // 0 (unknown: the local transport, whose ranks are threads of one process, or a transport
    // made outside init) is a key like any other: every such rank is on one host.
    const uint64_t key = transport.host_key(members[r]);
    if (key != 0) layout.known = true;
    const auto it = std::find(keys.begin(), keys.end(), key);
    const size_t h = static_cast<size_t>(it - keys.begin());
    if (it == keys.end()) {
      keys.push_back(key);
      layout.hosts.emplace_back();
    }
    layout.host_of[r] = static_cast<int>(h);
    layout.hosts[h].push_back(static_cast<int>(r));
  }
  return layout;
}

Placement placement_of(const HostLayout& layout) {
  if (!layout.known) return Placement::Unknown;
  if (layout.num_hosts() == 1) return Placement::OneHost;
  for (const std::vector<int>& host : layout.hosts)
    if (host.size() > 1) return Placement::SharedHosts;
  return Placement::ApartHosts;
}

int HostLayout::local_rank() const {
  const std::vector<int>& mine = hosts[static_cast<size_t>(host())];
  return static_cast<int>(std::find(mine.begin(), mine.end(), rank) - mine.begin());
}

bool HostLayout::uniform() const {
  for (const auto& h : hosts)
    if (h.size() != hosts.front().size()) return false;
  return true;
}

bool HostLayout::contiguous() const {
  for (const auto& h : hosts)
    if (h.back() - h.front() + 1 != static_cast<int>(h.size())) return false;
  return true;
}

std::string HostLayout::describe() const {
  std::string out = detail::str(num_hosts(), num_hosts() == 1 ? " host" : " hosts");
  if (uniform()) {
    const size_t n = hosts.front().size();
    out += detail::str(", ", n, n == 1 ? " rank" : " ranks", num_hosts() == 1 ? "" : " each");
  } else {
    out += ", ";
    for (size_t h = 0; h < hosts.size(); ++h) out += detail::str(h ? " + " : "", hosts[h].size());
    out += " ranks";
  }
  out += ":";
  for (size_t h = 0; h < hosts.size(); ++h) {
    const std::vector<int>& r = hosts[h];
    out += detail::str(h ? "," : "", " host ", h, " rank", r.size() == 1 ? " " : "s ");
    if (r.size() > 1 && r.back() - r.front() + 1 == static_cast<int>(r.size())) {
      out += detail::str(r.front(), "-", r.back());
    } else {
      for (size_t i = 0; i < r.size(); ++i) out += detail::str(i ? "," : "", r[i]);
    }
  }
  return out;
}

std::string detail::where(const char* op, const Group& group) {
  return str(op, " on rank ", group.rank(), " of group ", group.id(), " (size ", group.size(),
             ")");
}

}  // namespace ferry
