// torchrec topology helpers: local size / rank from the launcher's environment, group rank,
// number of groups, intra- and cross-node groups and their cache. Rank bodies record what they saw;
// Catch2 checks it on the main thread afterwards (its macros are not thread-safe).
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/run_ranks.h>
#include <ferry/collectives/torchrec/torchrec.h>
#include "env_guard.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace ferry;
using namespace ferry::torchrec;
using Catch::Matchers::Contains;
using torchrec_test::EnvGuard;

namespace {

struct NodeView {
  std::vector<int> intra, cross;
  int intra_rank = -1, cross_rank = -1;
  int local_rank = -1, group_rank = -1;
  double intra_sum = 0, cross_sum = 0;  // all_reduce of the world ranks over each group
  uint32_t intra_id = 0, cross_id = 0;
  uint32_t intra_id_again = 0, cross_id_again = 0;
  uint64_t world_seq_before_again = 0, world_seq_after_again = 0;
};

std::vector<NodeView> node_views(int world_size, int local_size = 0) {
  std::vector<NodeView> views(static_cast<size_t>(world_size));
  run_ranks(world_size, [&](Group& world) {
    NodeView& v = views[static_cast<size_t>(world.rank())];
    auto [intra, cross] = intra_and_cross_node_pg(world, local_size);
    v.intra = intra.members();
    v.cross = cross.members();
    v.intra_rank = intra.rank();
    v.cross_rank = cross.rank();
    v.local_rank = get_local_rank(world);
    v.group_rank = get_group_rank(world);
    Tensor a = full({1}, world.rank(), DType::Float64);
    Tensor b = full({1}, world.rank(), DType::Float64);
    all_reduce(a, intra).wait();
    all_reduce(b, cross).wait();
    v.intra_sum = a.get_flat(0);
    v.cross_sum = b.get_flat(0);
    v.intra_id = intra.id();
    v.cross_id = cross.id();
    // Cached: the same groups, and no collective on the world.
    v.world_seq_before_again = world.sequence_number();
    auto [intra2, cross2] = intra_and_cross_node_pg(world, local_size);
    v.world_seq_after_again = world.sequence_number();
    v.intra_id_again = intra2.id();
    v.cross_id_again = cross2.id();
  });
  return views;
}

}  // namespace

TEST_CASE("topology: W=8, LOCAL_WORLD_SIZE=4 gives two nodes of four", "[topology]") {
  EnvGuard env;
  env.set("LOCAL_WORLD_SIZE", "4");
  CHECK(get_local_size(8) == 4);
  CHECK(get_local_rank(8, 6) == 2);  // no LOCAL_RANK: 6 % 4
  CHECK(get_group_rank(8, 6) == 1);
  CHECK(get_num_groups(8) == 2);

  const std::vector<NodeView> views = node_views(8);
  for (int r = 0; r < 8; ++r) {
    INFO("rank " << r);
    const NodeView& v = views[static_cast<size_t>(r)];
    const int node = r / 4, local = r % 4;
    std::vector<int> intra, cross;
    for (int i = 0; i < 4; ++i) intra.push_back(node * 4 + i);
    for (int g = 0; g < 2; ++g) cross.push_back(g * 4 + local);
    CHECK(v.intra == intra);  // [0,1,2,3] or [4,5,6,7]
    CHECK(v.cross == cross);  // [0,4], [1,5], [2,6], [3,7]
    CHECK(v.intra_rank == local);
    CHECK(v.cross_rank == node);
    CHECK(v.local_rank == local);
    CHECK(v.group_rank == node);
    CHECK(v.intra_sum == (node == 0 ? 0 + 1 + 2 + 3 : 4 + 5 + 6 + 7));
    CHECK(v.cross_sum == local + (local + 4));
    CHECK(v.intra_id_again == v.intra_id);
    CHECK(v.cross_id_again == v.cross_id);
    CHECK(v.world_seq_after_again == v.world_seq_before_again);
  }
}

TEST_CASE("topology: defaults without any launcher variable", "[topology]") {
  EnvGuard env;
  CHECK(get_local_size(4) == 4);  // 8 does not divide 4: one node
  CHECK(get_num_groups(4) == 1);
  CHECK(get_local_size(16) == 8);
  CHECK(get_num_groups(16) == 2);
  CHECK(get_local_rank(16, 13) == 5);
  CHECK(get_group_rank(16, 13) == 1);
  CHECK(get_local_size(8) == kDefaultLocalSize);
  CHECK(get_local_size(1) == 1);
}

TEST_CASE("local size: precedence, negative values skipped", "[topology][env]") {
  EnvGuard env;
  env.set("MV2_COMM_WORLD_LOCAL_SIZE", "1");
  CHECK(get_local_size(8) == 1);
  env.set("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
  CHECK(get_local_size(8) == 2);
  env.set("MPI_LOCALNRANKS", "4");
  CHECK(get_local_size(8) == 4);
  env.set("LOCAL_WORLD_SIZE", "8");
  CHECK(get_local_size(8) == 8);
  env.set("LOCAL_WORLD_SIZE", "-1");  // skipped: the next one counts
  CHECK(get_local_size(8) == 4);
  // Only the first non-negative value is read: a malformed later one does not matter.
  env.set("OMPI_COMM_WORLD_LOCAL_SIZE", "garbage");
  CHECK(get_local_size(8) == 4);
  // Blanks and a '+' are accepted, as Python's int() accepts them.
  env.set("LOCAL_WORLD_SIZE", " +2\n");
  CHECK(get_local_size(8) == 2);
}

TEST_CASE("local rank: precedence, missing, too large", "[topology][env]") {
  EnvGuard env;
  env.set("LOCAL_WORLD_SIZE", "4");
  CHECK(get_local_rank(8, 5) == 1);
  env.set("MV2_COMM_WORLD_LOCAL_RANK", "0");
  CHECK(get_local_rank(8, 5) == 0);
  env.set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
  CHECK(get_local_rank(8, 5) == 1);
  env.set("MPI_LOCALRANKID", "2");
  CHECK(get_local_rank(8, 5) == 2);
  env.set("LOCAL_RANK", "3");
  CHECK(get_local_rank(8, 5) == 3);
  env.set("LOCAL_RANK", "-5");  // skipped
  CHECK(get_local_rank(8, 5) == 2);
  env.set("LOCAL_RANK", "4");  // not below the local size: rank % local size
  CHECK(get_local_rank(8, 7) == 3);
  // The group rank comes from the rank, never from the local rank variables.
  CHECK(get_group_rank(8, 7) == 1);
}

TEST_CASE("local size that does not divide the world size falls back to it", "[topology][env]") {
  EnvGuard env;
  env.set("LOCAL_WORLD_SIZE", "3");
  CHECK(get_local_size(8) == 8);
  CHECK(get_num_groups(8) == 1);
  CHECK(get_local_rank(8, 5) == 5);
  CHECK(get_group_rank(8, 5) == 0);
  env.set("LOCAL_WORLD_SIZE", "16");  // larger than the world
  CHECK(get_local_size(8) == 8);
  CHECK(get_local_size(32) == 16);
  // The node groups follow the fallback: one node of 3 ranks.
  const std::vector<NodeView> views = node_views(3);
  for (const NodeView& v : views) {
    CHECK(v.intra == std::vector<int>{0, 1, 2});
    CHECK(v.cross.size() == 1);
  }
}

TEST_CASE("malformed launcher variables are named in the error", "[topology][env]") {
  EnvGuard env;
  for (const char* bad : {"abc", "4x", "", "+-3", "--1", "4.0", "99999999999999999999"}) {
    INFO("value \"" << bad << "\"");
    env.set("MPI_LOCALNRANKS", bad);
    CHECK_THROWS_AS(get_local_size(8), InvalidArgument);
    CHECK_THROWS_WITH(get_local_size(8), Contains("MPI_LOCALNRANKS") &&
                                             Contains(std::string("\"") + bad + "\""));
  }
  env.unset("MPI_LOCALNRANKS");
  env.set("LOCAL_WORLD_SIZE", "0");
  CHECK_THROWS_WITH(get_local_size(8), Contains("LOCAL_WORLD_SIZE=0"));
  env.unset("LOCAL_WORLD_SIZE");
  env.set("OMPI_COMM_WORLD_LOCAL_RANK", "one");
  CHECK_THROWS_AS(get_local_rank(8, 1), InvalidArgument);
  CHECK_THROWS_WITH(get_local_rank(8, 1), Contains("OMPI_COMM_WORLD_LOCAL_RANK") &&
                                              Contains("\"one\""));
}

TEST_CASE("topology arguments out of range", "[topology]") {
  EnvGuard env;
  CHECK_THROWS_AS(get_local_size(0), InvalidArgument);
  CHECK_THROWS_AS(get_local_rank(8, 8), InvalidArgument);
  CHECK_THROWS_AS(get_local_rank(8, -1), InvalidArgument);
  CHECK_THROWS_AS(get_group_rank(4, 4), InvalidArgument);
  CHECK_THROWS_AS(get_local_size(Group()), InvalidArgument);
  auto [intra, cross] = intra_and_cross_node_pg(Group());
  CHECK(!intra.valid());
  CHECK(!cross.valid());
  // An explicit local size must divide the group size: the same error on every rank, before
  // any communication.
  std::vector<std::string> errors(4);
  run_ranks(4, [&](Group& world) {
    try {
      intra_and_cross_node_pg(world, 3);
    } catch (const InvalidArgument& e) {
      errors[static_cast<size_t>(world.rank())] = e.what();
    }
  });
  for (const std::string& e : errors) CHECK_THAT(e, Contains("local size 3"));
}

TEST_CASE("node groups: explicit local size, sub-group as world, cache per local size",
          "[topology]") {
  EnvGuard env;
  // W=6, L=2: nodes {0,1},{2,3},{4,5}; cross {0,2,4},{1,3,5}.
  const std::vector<NodeView> views = node_views(6, 2);
  for (int r = 0; r < 6; ++r) {
    const NodeView& v = views[static_cast<size_t>(r)];
    CHECK(v.intra == std::vector<int>{r / 2 * 2, r / 2 * 2 + 1});
    CHECK(v.cross == std::vector<int>{r % 2, r % 2 + 2, r % 2 + 4});
    CHECK(v.world_seq_after_again == v.world_seq_before_again);
  }

  // On a sub-group: group ranks, not world ranks, make the blocks. Odd world ranks {1,3,5,7}
  // with L=2: intra {1,3},{5,7}; cross {1,5},{3,7}. Then L=4 is another cache entry.
  struct Seen {
    std::vector<int> intra, cross, intra4;
    bool same_pair_again = false;
  };
  std::vector<Seen> seen(8);
  run_ranks(8, [&](Group& world) {
    const int r = world.rank();
    Group odd = world.split(r % 2 == 1 ? 0 : kUndefinedColor, r);
    if (!odd.valid()) return;
    Seen& s = seen[static_cast<size_t>(r)];
    auto [intra, cross] = intra_and_cross_node_pg(odd, 2);
    s.intra = intra.members();
    s.cross = cross.members();
    auto [intra4, cross4] = intra_and_cross_node_pg(odd, 4);
    s.intra4 = intra4.members();
    auto [intra_again, cross_again] = intra_and_cross_node_pg(odd, 2);
    s.same_pair_again = intra_again.id() == intra.id() && cross_again.id() == cross.id() &&
                        intra4.id() != intra.id();
  });
  for (int r = 1; r < 8; r += 2) {
    INFO("world rank " << r);
    const Seen& s = seen[static_cast<size_t>(r)];
    CHECK(s.intra == (r < 5 ? std::vector<int>{1, 3} : std::vector<int>{5, 7}));
    CHECK(s.cross == (r % 4 == 1 ? std::vector<int>{1, 5} : std::vector<int>{3, 7}));
    CHECK(s.intra4 == std::vector<int>{1, 3, 5, 7});
    CHECK(s.same_pair_again);
  }
}

TEST_CASE("host layout: what it says of hosts by hand, and of a local world", "[topology][hosts]") {
  // 3 + 1: hosts by their first rank, the uneven sizes in the description.
  HostLayout uneven{true, 3, {0, 0, 0, 1}, {{0, 1, 2}, {3}}};
  CHECK(uneven.num_hosts() == 2);
  CHECK(uneven.host() == 1);
  CHECK(uneven.local_rank() == 0);
  CHECK(uneven.local_size() == 1);
  CHECK_FALSE(uneven.uniform());
  CHECK(uneven.contiguous());
  CHECK(uneven.describe() == "2 hosts, 3 + 1 ranks: host 0 ranks 0-2, host 1 rank 3");
  // Round robin: even, but a host's ranks are not consecutive.
  HostLayout round_robin{true, 2, {0, 1, 0, 1}, {{0, 2}, {1, 3}}};
  CHECK(round_robin.uniform());
  CHECK_FALSE(round_robin.contiguous());
  CHECK(round_robin.local_rank() == 1);
  CHECK(round_robin.describe() == "2 hosts, 2 ranks each: host 0 ranks 0,2, host 1 ranks 1,3");
  // A local world is one host; the helpers keep reading the launcher variables there.
  EnvGuard env;
  env.set("LOCAL_WORLD_SIZE", "2");
  std::vector<HostLayout> seen(3);
  std::vector<int> local_size(3);
  run_ranks(3, [&](Group& world) {
    seen[static_cast<size_t>(world.rank())] = world.host_layout();
    local_size[static_cast<size_t>(world.rank())] = get_local_size(world);
  });
  for (int r = 0; r < 3; ++r) {
    const HostLayout& l = seen[static_cast<size_t>(r)];
    CHECK_FALSE(l.known);
    CHECK(l.num_hosts() == 1);
    CHECK(l.local_rank() == r);
    CHECK(l.local_size() == 3);
    CHECK(l.describe() == "1 host, 3 ranks: host 0 ranks 0-2");
    CHECK(local_size[static_cast<size_t>(r)] == 3);  // 2 does not divide 3: one node
  }
}
