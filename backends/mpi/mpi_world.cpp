#include <ferry/backends/mpi/mpi_world.h>

#include <ferry/backends/mpi/mpi_error.h>
#include <ferry/backends/mpi/mpi_wait.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/log.h>

#include <numeric>
#include <thread>

namespace ferry::detail {

MPI_Comm dup_with_errors_returned(MPI_Comm comm, const std::string& where) {
  MPI_Comm dup = MPI_COMM_NULL;
  // The user's communicator may still abort on errors: ask for return codes on the copy first.
  check_mpi(MPI_Comm_dup(comm, &dup), "MPI_Comm_dup", where);
  check_mpi(MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", where);
  return dup;
}

MpiGroupComms::MpiGroupComms(MPI_Comm coll_comm, MPI_Comm side_comm,
                             const std::vector<int>& members, int world_size)
    : coll(coll_comm), side(side_comm), world_ranks(members), rank_of_world(world_size, -1) {
  for (size_t r = 0; r < members.size(); ++r) rank_of_world[members[r]] = static_cast<int>(r);
}

MpiGroupComms::~MpiGroupComms() {
  if (stuck.load() || !mpi_usable()) return;
  if (coll != MPI_COMM_NULL) MPI_Comm_free(&coll);
  if (side != MPI_COMM_NULL) MPI_Comm_free(&side);
}

MpiWorld::MpiWorld(MPI_Comm base) : base_(base) {
  check_mpi(MPI_Comm_rank(base_, &rank_), "MPI_Comm_rank", "the mpi transport's communicator");
  check_mpi(MPI_Comm_size(base_, &size_), "MPI_Comm_size", "the mpi transport's communicator");
  check_mpi(MPI_Comm_group(base_, &base_group_), "MPI_Comm_group",
            "the mpi transport's communicator");
  void* value = nullptr;
  int found = 0;
  check_mpi(MPI_Comm_get_attr(base_, MPI_TAG_UB, &value, &found), "MPI_Comm_get_attr(MPI_TAG_UB)",
            "the mpi transport's communicator");
  if (found) tag_ub_ = *static_cast<int*>(value);
  // Collective over `base`, like the rest of the transport's construction.
  MPI_Comm host = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split_type(base_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &host),
            "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)", "the mpi transport's communicator");
  check_mpi(MPI_Comm_size(host, &ranks_on_host_), "MPI_Comm_size",
            "the mpi transport's host communicator");
  MPI_Comm_free(&host);
  const auto cores = static_cast<int>(std::thread::hardware_concurrency());
  set_mpi_waits_yield(ranks_on_host_ > cores);
  FERRY_LOG(Info, "transport", "mpi: ", ranks_on_host_, " rank(s) on this host, ", cores,
            " core(s): waits ", ranks_on_host_ > cores ? "yield between tests" : "poll without yielding");
}

MpiWorld::~MpiWorld() {
  if (!mpi_usable()) return;
  if (base_group_ != MPI_GROUP_NULL) MPI_Group_free(&base_group_);
  MPI_Comm_free(&base_);
}

std::vector<int> MpiWorld::world_ranks_of(MPI_Comm comm) const {
  MPI_Group group = MPI_GROUP_NULL;
  check_mpi(MPI_Comm_group(comm, &group), "MPI_Comm_group", "a split communicator");
  int n = 0;
  MPI_Group_size(group, &n);
  std::vector<int> ranks(static_cast<size_t>(n)), world(static_cast<size_t>(n));
  std::iota(ranks.begin(), ranks.end(), 0);
  const int code = MPI_Group_translate_ranks(group, n, ranks.data(), base_group_, world.data());
  MPI_Group_free(&group);
  check_mpi(code, "MPI_Group_translate_ranks", "a split communicator");
  return world;
}

void MpiWorld::add(uint32_t group, std::shared_ptr<MpiGroupComms> comms) {
  std::lock_guard<std::mutex> lock(mu_);
  FERRY_CHECK(groups_.emplace(group, std::move(comms)).second, InvalidArgument,
              "mpi transport: group id ", group, " exists already on world rank ", rank_,
              " (one world Group per transport)");
}

void MpiWorld::remove(uint32_t group) {
  std::lock_guard<std::mutex> lock(mu_);
  groups_.erase(group);
}

std::shared_ptr<MpiGroupComms> MpiWorld::find(uint32_t group, const char* why) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = groups_.find(group);
  FERRY_CHECK(it != groups_.end(), TransportError, "mpi transport: ", why, " on world rank ",
              rank_, ": group ", group,
              " has no MPI communicator here (it was destroyed, or this rank is not a member)");
  return it->second;
}

}  // namespace ferry::detail
