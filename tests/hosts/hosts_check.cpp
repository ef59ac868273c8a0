// One job on simulated hosts (tools/hosts), as every rank runs it: what the ranks learnt about
// where they run, and collectives whose bytes cross hosts.
//
//  1. The layout (Group::host_layout) against the harness's: HOSTS_LAYOUT lists the ranks on
//     each host ("3 1"), filled host by host; a rank on host h runs on ferry-h<h>. Hosts, local
//     rank and size, node index; FERRY_DEBUG=info's line is the library's; the UCX transport's
//     count of the ranks on its host.
//  2. The torchrec helpers on the world: local rank, group rank (= host), number of groups, the
//     intra- and cross-host groups (members, and an all_reduce over each); get_local_size gives
//     the ranks per host, or refuses hosts of different sizes with InvalidArgument.
//  3. Launcher variables: those the launcher set (torchrun's under --launcher-vars, Hydra's
//     MPI_LOCALNRANKS / MPI_LOCALRANKID) agree; a LOCAL_WORLD_SIZE or LOCAL_RANK that disagrees
//     gives InvalidArgument naming the variable and the job's value.
//  4. all_reduce, all_gather and all_to_all_single (8 B to 1 MiB per peer) across the hosts,
//     every value checked, and the bytes seen leaving this host's eth0 (its only link to the
//     others) during the largest all_to_all: at least what this rank sent to the other hosts.
//  5. The hierarchical all_reduce: the table's choice for 1 MiB ran (the hierarchical algorithm
//     where the transport has no collectives of its own); forced, every rank ends with the same
//     bits of an order-sensitive float sum, and its host's eth0 carries less than the flat
//     ring's (each byte about once per host, where the ring sends 3/2 of it on 2 + 2 and 3 + 1).
//  6. The hierarchical reduce_scatter and all_gather: the table's choice without collectives of
//     the transport's own; forced, the values, and the hosts' links carry fewer bytes in all
//     than under the flat ring (2 + 2: each host 2 blocks where the ring sends 3; 3 + 1: the
//     host of 3 ranks as many as the ring, the host of 1 one block or three where the ring
//     sends 3), and no host's link more than the ring's.
//
// Exit status 0 when every check passed on every rank. Under mpiexec it initializes MPI itself
// and ends without MPI_Finalize (see the end of main).
#include "tests/mpi/job_checks.h"
#ifdef HOSTS_CHECK_MPI
#include <ferry/backends/mpi/mpi_launcher_exit.h>
#include <mpi.h>
#endif
#include <ferry/collectives/algorithm_table.h>
#include <ferry/collectives/engine/group_impl.h>
#include <ferry/collectives/torchrec/torchrec.h>
#include <ferry/ferry.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

std::vector<int> expected_layout() {
  std::vector<int> v;
  std::istringstream in(std::getenv("HOSTS_LAYOUT") ? std::getenv("HOSTS_LAYOUT") : "");
  for (int n; in >> n;) v.push_back(n);
  return v;
}

int64_t tx_bytes() {
  std::ifstream in("/sys/class/net/eth0/statistics/tx_bytes");
  int64_t v = -1;
  in >> v;
  return v;
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const ferry::InvalidArgument& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Element i of rank r's order-sensitive floats: magnitudes from 1e-3 to 1e5, so that the order
// of the additions changes the float sum's last bits.
float sensitive(int r, int64_t i) {
  uint64_t h = static_cast<uint64_t>(r) * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(i);
  h = (h ^ (h >> 31)) * 0xBF58476D1CE4E5B9ull;
  h ^= h >> 29;
  const double unit = static_cast<double>(h >> 11) / 9007199254740992.0;
  return static_cast<float>((unit - 0.5) * std::pow(10.0, static_cast<double>(h % 9) - 3.0));
}

// Part 5: a forced all_reduce of `n` order-sensitive floats, checked; returns the bytes its
// host's eth0 sent meanwhile.
int64_t forced_all_reduce(ftest_mpi::Checks& c, ferry::Group& world, const char* algo,
                          int64_t n) {
  using namespace ferry;
  const int W = world.size(), me = world.rank();
  set_algorithm_override(std::string("all_reduce:") + algo);
  Tensor x = empty({n}, DType::Float32);
  for (int64_t i = 0; i < n; ++i) x.data<float>()[i] = sensitive(me, i);
  const uint64_t runs = world.impl().runs(Collective::AllReduce, Algorithm::Hierarchical);
  // Every rank reads the counter between two barriers: a rank that leaves a barrier first must
  // not start sending before the others have read it (MPI's barrier lets ranks go one by one).
  barrier(world).wait();
  const int64_t before = tx_bytes();
  barrier(world).wait();
  all_reduce(x, world).wait();
  barrier(world).wait();
  const int64_t sent = tx_bytes() - before;
  barrier(world).wait();
  set_algorithm_override("");
  const bool hierarchical = std::string(algo) == "hierarchical";
  c.expect(world.impl().runs(Collective::AllReduce, Algorithm::Hierarchical) ==
               runs + (hierarchical ? 1 : 0),
           std::string("forced ") + algo + " ran");
  Tensor all = empty({n * W}, DType::Float32);
  all_gather(x, all, world).wait();
  bool same = true, near = true;
  for (int r = 0; r < W; ++r)
    same = same && std::memcmp(all.data<float>() + r * n, x.data<float>(), n * 4) == 0;
  for (int64_t i = 0; i < n && near; ++i) {
    double sum = 0;
    for (int r = 0; r < W; ++r) sum += sensitive(r, i);
    near = std::fabs(x.data<float>()[i] - sum) <= 0.01 * W;
  }
  c.expect(same, std::string(algo) + " all_reduce: every rank has the same bits");
  c.expect(near, std::string(algo) + " all_reduce: the sum's values");
  return sent;
}

// Part 6: a forced reduce_scatter or all_gather of blocks of `n` float32 (integers, so every
// order of the additions gives the same sum), checked; returns the bytes its host's eth0 sent
// meanwhile.
int64_t forced_blocks(ftest_mpi::Checks& c, ferry::Group& world, ferry::Collective op,
                      const char* algo, int64_t n) {
  using namespace ferry;
  const int W = world.size(), me = world.rank();
  const bool rs = op == Collective::ReduceScatter;
  const std::string what = std::string(algo) + " " + collective_name(op);
  set_algorithm_override(std::string(collective_name(op)) + ":" + algo);
  Tensor in = empty({rs ? n * W : n}, DType::Float32), out = empty({rs ? n : n * W}, DType::Float32);
  for (int64_t i = 0; i < in.numel(); ++i)
    in.data<float>()[i] = static_cast<float>((me + 1) * 1000 + i % 977);
  const uint64_t runs = world.impl().runs(op, Algorithm::Hierarchical);
  barrier(world).wait();  // as forced_all_reduce: every rank reads the counters first
  const int64_t before = tx_bytes();
  barrier(world).wait();
  (rs ? reduce_scatter(in, out, world) : all_gather(in, out, world)).wait();
  barrier(world).wait();
  const int64_t sent = tx_bytes() - before;
  barrier(world).wait();
  set_algorithm_override("");
  const bool hierarchical = std::string(algo) == "hierarchical";
  c.expect(world.impl().runs(op, Algorithm::Hierarchical) == runs + (hierarchical ? 1 : 0),
           "forced " + what + " ran");
  bool good = true;
  for (int64_t i = 0; i < out.numel() && good; ++i) {
    double want = 0;
    if (rs) {
      for (int r = 0; r < W; ++r) want += (r + 1) * 1000 + (me * n + i) % 977;
    } else {
      want = (i / n + 1) * 1000 + (i % n) % 977;
    }
    good = out.data<float>()[i] == want;
  }
  c.expect(good, what + ": the values");
  return sent;
}

// Every host's bytes, `sent` as its ranks measured it (the same eth0): by host, from its first
// rank.
std::vector<int64_t> per_host(ferry::Group& world, const ferry::HostLayout& layout, int64_t sent) {
  using namespace ferry;
  Tensor mine = full({1}, static_cast<double>(sent), DType::Int64);
  Tensor all = empty({world.size()}, DType::Int64);
  all_gather(mine, all, world).wait();
  std::vector<int64_t> by_host;
  for (const auto& on : layout.hosts) by_host.push_back(all.data<int64_t>()[on.front()]);
  return by_host;
}

}  // namespace

int main() {
  using namespace ferry;
  using namespace ferry::torchrec;
  ftest_mpi::Checks c;
  bool ok = false, own_mpi = false;
#ifdef HOSTS_CHECK_MPI
  if (std::getenv("PMI_RANK") != nullptr) {  // under mpiexec: see the end of main
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    own_mpi = true;
  }
#endif
  {
    Group world = init();
    const int W = world.size(), me = world.rank();
    const std::vector<int> sizes = expected_layout();
    char name[64] = {};
    (void)gethostname(name, sizeof name - 1);
    const std::string host_name(name);
    c.expect(!sizes.empty(), "HOSTS_LAYOUT is set (run under tools/hosts)");
    int first = 0, host = 0, total = 0;
    for (size_t h = 0; h < sizes.size(); ++h) {
      if (me >= total && me < total + sizes[h]) host = static_cast<int>(h), first = total;
      total += sizes[h];
    }
    c.expect(total == W, "HOSTS_LAYOUT adds up to the world size");
    c.expect(host_name == "ferry-h" + std::to_string(host),
             "rank " + std::to_string(me) + " runs on ferry-h" + std::to_string(host) +
                 " (it runs on " + host_name + ")");

    // 1. The layout.
    const HostLayout layout = world.host_layout();
    if (me == 0) std::printf("hosts: %s\n", layout.describe().c_str());
    c.expect(layout.known, "the host keys were exchanged");
    c.expect(layout.num_hosts() == static_cast<int>(sizes.size()), "number of hosts");
    c.expect(layout.host() == host, "this rank's host index");
    c.expect(layout.local_rank() == me - first, "local rank");
    c.expect(!sizes.empty() && layout.local_size() == sizes[static_cast<size_t>(host)],
             "local size");
    bool uniform = true;
    for (int s : sizes) uniform = uniform && s == sizes.front();
    c.expect(layout.uniform() == uniform && layout.contiguous(), "uniform / contiguous");
    // The UCX transport's count of the ranks on this host, which tells the engine whether a
    // background thread would take a rank's core (MPI's comes from MPI_COMM_TYPE_SHARED).
    const ferry::Transport& transport = world.impl().transport();
    if (transport.name() == "ucx")
      c.expect(transport.ranks_on_host() == layout.local_size(),
               "the ucx transport counts " + std::to_string(transport.ranks_on_host()) +
                   " ranks on this host, the layout " + std::to_string(layout.local_size()));

    // 2. torchrec's view.
    c.expect(get_local_rank(world) == me - first, "torchrec get_local_rank");
    c.expect(get_group_rank(world) == host, "torchrec get_group_rank = host index");
    c.expect(get_num_groups(world) == static_cast<int>(sizes.size()), "torchrec get_num_groups");
    if (uniform) {
      c.expect(get_local_size(world) == sizes.front(), "torchrec get_local_size");
    } else {
      const std::string e = error_of([&] { (void)get_local_size(world); });
      c.expect(has(e, "different numbers of ranks") && has(e, layout.describe()),
               "get_local_size refuses uneven hosts, naming them (got: " + e + ")");
    }
    auto [intra, cross] = intra_and_cross_node_pg(world);
    std::vector<int> want_intra, want_cross;
    for (int r = 0; r < W; ++r) {
      if (layout.host_of[static_cast<size_t>(r)] == host) want_intra.push_back(r);
    }
    for (size_t h = 0; h < layout.hosts.size(); ++h) {
      const std::vector<int>& on = layout.hosts[h];
      const size_t local = static_cast<size_t>(me - first);
      if (on.size() > local) want_cross.push_back(on[local]);
    }
    c.expect(intra.valid() && intra.members() == want_intra,
             "intra-host group = this host's ranks");
    c.expect(cross.valid() && cross.members() == want_cross,
             "cross-host group = the ranks of this local rank on every host");
    Tensor a = full({1}, me, DType::Float64), b = full({1}, me, DType::Float64);
    all_reduce(a, intra).wait();
    all_reduce(b, cross).wait();
    double sa = 0, sb = 0;
    for (int r : want_intra) sa += r;
    for (int r : want_cross) sb += r;
    c.expect(a.get_flat(0) == sa && b.get_flat(0) == sb, "all_reduce over intra and cross groups");

    // 3. Launcher variables.
    for (const char* v : {"LOCAL_WORLD_SIZE", "MPI_LOCALNRANKS"}) {
      if (const char* s = std::getenv(v))
        c.expect(std::atoi(s) == layout.local_size(), std::string(v) + " agrees with the job");
    }
    for (const char* v : {"LOCAL_RANK", "MPI_LOCALRANKID"}) {
      if (const char* s = std::getenv(v))
        c.expect(std::atoi(s) == layout.local_rank(), std::string(v) + " agrees with the job");
    }
    {
      const char* saved = std::getenv("LOCAL_WORLD_SIZE");
      const std::string keep = saved ? saved : "";
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(layout.local_size() + 1).c_str(), 1);
      const std::string e = error_of([&] { (void)get_local_rank(world); });
      c.expect(has(e, "LOCAL_WORLD_SIZE=" + std::to_string(layout.local_size() + 1)) &&
                   has(e, "local size " + std::to_string(layout.local_size())) &&
                   has(e, "on rank " + std::to_string(me)),
               "a LOCAL_WORLD_SIZE that disagrees is refused, naming both (got: " + e + ")");
      if (saved) ::setenv("LOCAL_WORLD_SIZE", keep.c_str(), 1); else ::unsetenv("LOCAL_WORLD_SIZE");
      const char* saved_rank = std::getenv("LOCAL_RANK");
      const std::string keep_rank = saved_rank ? saved_rank : "";
      const int wrong = (layout.local_rank() + 1) % (layout.local_size() + 1);
      ::setenv("LOCAL_RANK", std::to_string(wrong).c_str(), 1);
      const std::string e2 = error_of([&] { (void)get_group_rank(world); });
      c.expect(has(e2, "LOCAL_RANK=" + std::to_string(wrong)) &&
                   has(e2, "local rank " + std::to_string(layout.local_rank())),
               "a LOCAL_RANK that disagrees is refused, naming both (got: " + e2 + ")");
      if (saved_rank) ::setenv("LOCAL_RANK", keep_rank.c_str(), 1); else ::unsetenv("LOCAL_RANK");
    }

    // 4. Collectives across the hosts.
    for (int64_t n : {int64_t{1}, int64_t{1} << 17}) {  // 8 B and 1 MiB of float64
      Tensor x = empty({n}, DType::Float64);
      for (int64_t i = 0; i < n; ++i)
        x.data<double>()[i] = me + 1 + 0.5 * static_cast<double>(i % 7);
      all_reduce(x, world).wait();
      bool good = true;
      for (int64_t i = 0; i < n && good; ++i)
        good = x.data<double>()[i] == W * (W + 1) / 2.0 + W * 0.5 * static_cast<double>(i % 7);
      c.expect(good, "all_reduce of " + std::to_string(n) + " float64");

      Tensor mine = empty({n}, DType::Int64), all = empty({n * W}, DType::Int64);
      for (int64_t i = 0; i < n; ++i) mine.data<int64_t>()[i] = me * 1000003 + i;
      all_gather(mine, all, world).wait();
      good = true;
      for (int r = 0; r < W && good; ++r)
        for (int64_t i = 0; i < n && good; ++i)
          good = all.data<int64_t>()[r * n + i] == r * 1000003 + i;
      c.expect(good, "all_gather of " + std::to_string(n) + " int64 per rank");
    }
    for (int64_t n : {int64_t{1}, int64_t{1} << 17}) {  // per peer
      Tensor in = empty({n * W}, DType::Int64), out = empty({n * W}, DType::Int64);
      for (int d = 0; d < W; ++d)
        for (int64_t i = 0; i < n; ++i) in.data<int64_t>()[d * n + i] = (me * 64 + d) * 1000003 + i;
      const int64_t before = tx_bytes();
      all_to_all_single(in, out, world).wait();
      // Once every rank has its blocks, every byte this rank sent to another host has left
      // through this host's eth0.
      barrier(world).wait();
      const int64_t after = tx_bytes();
      bool good = true;
      for (int s = 0; s < W && good; ++s)
        for (int64_t i = 0; i < n && good; ++i)
          good = out.data<int64_t>()[s * n + i] == (s * 64 + me) * 1000003 + i;
      c.expect(good, "all_to_all_single of " + std::to_string(n) + " int64 per peer");
      if (n > 1) {
        const int64_t other_hosts = W - layout.local_size();
        const int64_t least = other_hosts * n * 8;
        c.expect(before >= 0 && after - before >= least,
                 "eth0 carried this rank's bytes to the other hosts: " +
                     std::to_string(after - before) + " B sent, at least " +
                     std::to_string(least) + " B expected");
      }
    }
    // 5. The hierarchical all_reduce.
    {
      ferry::detail::GroupImpl& g = world.impl();
      const bool native = g.native() != nullptr;
      c.expect(g.placement() == Placement::SharedHosts, "the world's ranks share hosts");
      const Algorithm want =
          choose_algorithm(Collective::AllReduce, size_t{1} << 20, W, native, g.placement());
      c.expect(native || want == Algorithm::Hierarchical,
               "without collectives of the transport's own, 1 MiB takes hierarchical");
      uint64_t ran = 0;  // by part 4's 1 MiB; the transport's own ways count as one
      for (size_t a = 0; a < kAlgorithmCount; ++a) {
        const auto algo = static_cast<Algorithm>(a);
        if (algo == want || (uses_native_collectives(want) && uses_native_collectives(algo)))
          ran += g.runs(Collective::AllReduce, algo);
      }
      c.expect(ran >= 1, std::string("the 1 MiB all_reduce ran ") + algorithm_name(want));
      const int64_t n = int64_t{1} << 17;  // 512 KiB
      const int64_t hier = forced_all_reduce(c, world, "hierarchical", n);
      const int64_t ring = forced_all_reduce(c, world, "ring", n);
      if (me == 0)
        std::printf("eth0 of host 0 during 512 KiB all_reduce: hierarchical %lld B, ring %lld B\n",
                    static_cast<long long>(hier), static_cast<long long>(ring));
      c.expect(hier >= n * 4 / 2 && hier < ring,
               "the hierarchical all_reduce sent less between hosts than the ring: " +
                   std::to_string(hier) + " B against " + std::to_string(ring) + " B");
    }
    // 6. The hierarchical reduce_scatter and all_gather.
    for (Collective op : {Collective::ReduceScatter, Collective::AllGather}) {
      const bool native = world.impl().native() != nullptr;
      const Algorithm want =
          choose_algorithm(op, size_t{1} << 20, W, native, world.impl().placement());
      c.expect(native || want == Algorithm::Hierarchical,
               std::string("without collectives of the transport's own, ") + collective_name(op) +
                   " takes hierarchical");
      const int64_t n = int64_t{1} << 16;  // 256 KiB blocks
      const std::vector<int64_t> hier =
          per_host(world, layout, forced_blocks(c, world, op, "hierarchical", n));
      const std::vector<int64_t> ring =
          per_host(world, layout, forced_blocks(c, world, op, "ring", n));
      int64_t hier_all = 0, ring_all = 0;
      std::string text;
      for (size_t h = 0; h < hier.size(); ++h) {
        hier_all += hier[h];
        ring_all += ring[h];
        text += " host " + std::to_string(h) + " " + std::to_string(hier[h]) + " B against " +
                std::to_string(ring[h]) + " B;";
        // Beside the blocks, a link carries the acknowledgements of what comes in: allow 1/16.
        c.expect(hier[h] <= ring[h] + ring[h] / 16,
                 std::string(collective_name(op)) + ": no host's link carries more than the "
                 "ring's:" + text);
      }
      if (me == 0) std::printf("eth0 during %s of 256 KiB blocks, hierarchical against ring:%s\n",
                               collective_name(op), text.c_str());
      c.expect(hier_all < ring_all * 3 / 4,
               std::string(collective_name(op)) + ": the hosts' links carry at most 3/4 of the "
               "ring's bytes in all:" + text);
    }
    ok = ftest_mpi::every_rank_passed(c, world, "hosts-check");
  }
  finalize();
#ifdef HOSTS_CHECK_MPI
  // Under mpiexec across hosts, MPICH 4.0.2's MPI_Finalize over UCX 1.13's TCP does not always
  // return (a rank flushing its endpoints waits for peers that wait in the launcher's barrier;
  // on one host with UCX_TLS=tcp,self as well, without ferry). This program initialized MPI
  // itself, so ferry left it to it: every rank ends without MPI_Finalize alike, telling mpiexec
  // that it ends on purpose (what ferry does after a failed rank), so that no rank waits in a
  // barrier for another.
  if (own_mpi) {
    std::string why;
    if (ferry::detail::tell_launcher_rank_ends(5000, &why)) std::_Exit(ok ? 0 : 1);
    std::fprintf(stderr, "hosts_check: mpiexec could not be told that this rank ends (%s); "
                 "MPI_Finalize\n", why.c_str());
    MPI_Finalize();
  }
#endif
  return ok ? 0 : 1;
}
