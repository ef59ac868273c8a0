#include <ferry/collectives/engine/group_impl.h>

#include <ferry/collectives/group.h>

#include <ferry/runtime/error.h>
#include <ferry/runtime/log.h>

#include <algorithm>
#include <thread>


namespace ferry::detail {

GroupImpl::GroupImpl(std::shared_ptr<Transport> transport, std::vector<int> members, int rank,
                     uint32_t id, std::shared_ptr<NativeCollectives> native)
    : transport_(std::move(transport)),
      native_(std::move(native)),
      members_(std::move(members)),
      ranks_fill_cores_(transport_ != nullptr && host_full(*transport_)),
      rank_(rank),
      id_(id) {
  if (native_) {
    const std::chrono::microseconds grace = caller_first_grace(ranks_fill_cores_);
    executor_.set_caller_first(grace);
    if (id_ == 0) {
      FERRY_LOG(Info, "coll", "a queued collective waits ", grace.count(),
                " us for the caller who waits on it before the group's worker runs it");
    }
  }
}

bool GroupImpl::host_full(const Transport& transport) {
  const int ranks = transport.ranks_on_host();
  const auto cores = static_cast<int>(std::thread::hardware_concurrency());
  return ranks > 0 && cores > 0 && ranks >= cores;
}

std::chrono::microseconds GroupImpl::caller_first_grace(bool ranks_fill_cores) {
  // The worker runs a queued op that no caller waited for within the grace. With a core to
  // spare it runs beside the rank's own thread: a short grace starts ops early. When the host's
  // ranks fill its cores, the worker can only run by taking the core from its rank, and the op
  // then waits on the peer's own late arrival anyway: leave ops to the callers who wait for
  // them (the worker still starts any op within kMaxPoll, so one nobody waits for progresses).
  // 2 ranks on 2 cores, DLRM step at batch 128: 2.2 ms with the short grace, 1.6 ms with the
  // long one (ferry-dlrm --bench, alternating).
  if (ranks_fill_cores) return Executor::kMaxPoll;
  return std::chrono::microseconds(100);
}

Placement GroupImpl::placement() const {
  const int known = placement_.load(std::memory_order_relaxed);
  if (known >= 0) return static_cast<Placement>(known);
  if (transport_->host_key(transport_->rank()) == 0) return Placement::Unknown;  // asked again
  const Placement p = placement_of(host_layout_of(*this));
  placement_.store(static_cast<int>(p), std::memory_order_relaxed);
  return p;
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

std::vector<GroupProgress> group_progress(const Transport& world) {
  std::vector<GroupProgress> progress;
  LiveGroups& live = live_groups();
  std::lock_guard<std::mutex> lock(live.mu);
  for (const auto& weak : live.groups) {
    auto g = weak.lock();
    if (!g || &g->transport() != &world) continue;
    progress.push_back(g->progress());
  }
  return progress;
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

void GroupImpl::throw_if_poisoned(std::string_view op) const {
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

}  // namespace ferry::detail
