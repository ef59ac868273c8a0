#include "collectives/group.h"

#include "collectives/collectives.h"
#include "collectives/group_impl.h"
#include "collectives/algorithm_table.h"
#include "runtime/error.h"
#include "runtime/log.h"

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <tuple>

namespace ferry {
namespace detail {

ScratchArena::~ScratchArena() {
  for (char* p : data_) std::free(p);
}

char* ScratchArena::get(int slot, size_t bytes) {
  if (bytes > capacity_[slot]) {
    std::free(data_[slot]);
    size_t rounded = (bytes + 4095) / 4096 * 4096;
    data_[slot] = static_cast<char*>(std::aligned_alloc(64, rounded));
    FERRY_CHECK(data_[slot] != nullptr, Error, "scratch allocation of ", rounded, " bytes failed");
    capacity_[slot] = rounded;
  }
  return data_[slot];
}

void ScratchArena::leak() {
  for (int i = 0; i < kSlots; ++i) {
    data_[i] = nullptr;
    capacity_[i] = 0;
  }
}

GroupImpl::GroupImpl(std::shared_ptr<Transport> transport, std::vector<int> members, int rank,
                     uint32_t id, std::shared_ptr<NativeCollectives> native)
    : transport_(std::move(transport)),
      native_(std::move(native)),
      members_(std::move(members)),
      rank_(rank),
      id_(id) {
  if (native_) executor_.set_caller_first(std::chrono::microseconds(100));
}

GroupImpl::~GroupImpl() {
  finish_in_flight();
  // executor_ (the last member) is destroyed first and finishes what is queued.
}

void GroupImpl::finish_in_flight() {
  std::vector<std::weak_ptr<InFlightNative>> in_flight;
  {
    std::lock_guard<std::mutex> lock(in_flight_mu_);
    in_flight.swap(in_flight_);
  }
  for (auto& weak : in_flight) {
    if (auto op = weak.lock()) op->finish_before_group_ends(*this);
  }
}

void GroupImpl::finish_outstanding() {
  finish_in_flight();
  // A dropped Work of an op started at issue queues its clean-up, so the queue goes second.
  executor_.drain();
}

namespace {

struct LiveGroups {
  std::mutex mu;
  std::vector<std::weak_ptr<GroupImpl>> groups;
};

LiveGroups& live_groups() {
  static auto* g = new LiveGroups();  // never destroyed: finalize may run from atexit
  return *g;
}

}  // namespace

std::shared_ptr<GroupImpl> make_group_impl(std::shared_ptr<Transport> transport,
                                           std::vector<int> members, int rank, uint32_t id,
                                           std::shared_ptr<NativeCollectives> native) {
  auto impl = std::make_shared<GroupImpl>(std::move(transport), std::move(members), rank, id,
                                          std::move(native));
  LiveGroups& live = live_groups();
  std::lock_guard<std::mutex> lock(live.mu);
  std::erase_if(live.groups, [](const std::weak_ptr<GroupImpl>& w) { return w.expired(); });
  live.groups.push_back(impl);
  return impl;
}

void finish_every_group() {
  std::vector<std::shared_ptr<GroupImpl>> groups;
  {
    LiveGroups& live = live_groups();
    std::lock_guard<std::mutex> lock(live.mu);
    for (const auto& weak : live.groups)
      if (auto g = weak.lock()) groups.push_back(std::move(g));
  }
  for (const auto& g : groups) g->finish_outstanding();
}

void GroupImpl::track_in_flight(std::weak_ptr<InFlightNative> op) {
  std::lock_guard<std::mutex> lock(in_flight_mu_);
  if (in_flight_.size() >= 64) {  // forget finished ones now and then
    std::erase_if(in_flight_, [](const auto& w) { return w.expired(); });
  }
  in_flight_.push_back(std::move(op));
}

std::string GroupImpl::describe() const {
  std::string ranks;
  for (size_t i = 0; i < members_.size(); ++i) {
    if (i == 8 && members_.size() > 10) {
      ranks += ",...";
      break;
    }
    if (i) ranks += ',';
    ranks += std::to_string(members_[i]);
  }
  return str("group ", id_, " [world ", ranks, "] rank ", rank_, "/", members_.size());
}

void GroupImpl::poison(std::exception_ptr cause, const std::string& why) {
  std::lock_guard<std::mutex> lock(poison_mu_);
  if (poisoned_.load()) return;
  poison_cause_ = std::move(cause);
  poison_why_ = why;
  poisoned_.store(true);
}

std::string GroupImpl::poison_reason() const {
  std::lock_guard<std::mutex> lock(poison_mu_);
  return poison_why_;
}

void GroupImpl::throw_if_poisoned(const std::string& op) const {
  if (!poisoned_.load()) return;
  std::exception_ptr cause;
  std::string why;
  {
    std::lock_guard<std::mutex> lock(poison_mu_);
    cause = poison_cause_;
    why = poison_why_;
  }
  rethrow_with_prefix(cause, str(op, " on ", describe(),
                                 ": the group is poisoned by an earlier failure and can no longer "
                                 "be used; the failure was: "));
}

}  // namespace detail

Group Group::world(std::shared_ptr<Transport> transport) {
  FERRY_CHECK(transport != nullptr, InvalidArgument, "Group::world: transport is null");
  std::vector<int> members(transport->size());
  std::iota(members.begin(), members.end(), 0);
  int rank = transport->rank();
  std::shared_ptr<NativeCollectives> native = transport->native_world();
  if (native)
    FERRY_LOG(Info, "init", "world group on transport ", transport->name(), ": rank ", rank,
              " of ", transport->size(), "; every collective is carried natively by ",
              native->name(), " (the algorithm table and FERRY_ALGO do not apply):\n",
              algorithm_table());
  else
    FERRY_LOG(Info, "init", "world group on transport ", transport->name(), ": rank ", rank,
              " of ", transport->size(), "; algorithms:\n", algorithm_table());
  return Group(detail::make_group_impl(std::move(transport), std::move(members), rank, /*id=*/0,
                                       std::move(native)));
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
  return Group(detail::make_group_impl(parent.transport_ptr(), std::move(members), my_rank, id,
                                       std::move(native)));
}

}  // namespace ferry
