#include <ferry/collectives/algorithm_table.h>

#include <ferry/runtime/config.h>
#include <ferry/runtime/error.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <sstream>

namespace ferry {
namespace {

constexpr std::array kCollectives = {Collective::AllReduce, Collective::Reduce,
                                     Collective::ReduceScatter, Collective::AllGather,
                                     Collective::AllToAll,  Collective::Broadcast,
                                     Collective::Gather,    Collective::Scatter,
                                     Collective::Barrier};
static_assert(kCollectives.size() == kCollectiveCount);
constexpr std::array kAlgorithms = {Algorithm::Native,    Algorithm::Ring,
                                    Algorithm::Tree,      Algorithm::RecursiveDoubling,
                                    Algorithm::Direct,    Algorithm::Pairwise,
                                    Algorithm::Linear,    Algorithm::Dissemination,
                                    Algorithm::Persistent, Algorithm::Exchange,
                                    Algorithm::SharedMemory, Algorithm::Hierarchical};
static_assert(kAlgorithms.size() == kAlgorithmCount);

constexpr size_t kAnyBytes = SIZE_MAX;
constexpr int kAnyRanks = INT32_MAX;

// One row of a collective's automatic rule: the first row whose limits the op fits decides.
struct Rule {
  size_t max_bytes;  // per rank's input (times the group size with `in_all`)
  int max_ranks;
  Algorithm algorithm;
  int min_ranks = 1;
  bool in_all = false;  // the bound is on W times the bytes (all_gather's staged blocks)
  bool one_host = false;  // only for a group whose ranks all share one host
  bool shared_hosts = false;  // only for a group on several hosts, some holding several ranks
};

// A collective's automatic rule, held inline: the issue path reads it with no lock, guard or
// pointer to follow (a constant table).
struct Rules {
  std::array<Rule, 6> row{};
  size_t count = 0;
  constexpr Rules(std::initializer_list<Rule> rows) {
    for (const Rule& r : rows) row[count++] = r;
  }
  const Rule* begin() const { return row.data(); }
  const Rule* end() const { return row.data() + count; }
  const Rule& back() const { return row[count - 1]; }
};

struct Automatic {
  Rules rules;         // without native collectives; the last row takes any op
  Rules native_rules;  // with them (MPI); the last row takes any op
};

// With collectives of the transport's own (MPI) the rows are those its ways were measured
// for (mpi_persistent.h, mpi_exchange.h): a persistent request while every staged buffer
// holds at most 8 KiB (its MPI_Start costs what the blocking call does, where the
// non-blocking call adds a schedule); in groups of 2-4 ranks, rounds of point-to-point
// messages (broadcast: 2 ranks only, wider groups keep MPI's tree); else MPI's non-blocking
// call. A way the op's form cannot take falls to the next (see Algorithm::Persistent), the
// order the transport took them in before the table chose.
constexpr size_t kStaged = 8 * 1024;

// Up to 4 KiB per rank and 8 ranks, all_reduce takes the direct exchange: every rank sends its
// payload to every other rank at once and combines all of them, one round whose sends and
// receives can all be posted when the op is issued (direct_all_reduce.cpp here, and
// collectives/ops/direct_post.h). Up to 32 KiB, recursive doubling (log2 W exchange rounds of
// the whole payload: as many bytes as a binomial tree's reduce then broadcast, in half the
// rounds); above, the ring (2 (W-1) messages of 1/W of it). The 32 KiB bound was measured
// between the binomial tree and the ring (where they cost about the same on one host with the
// local transport) and kept when recursive doubling took the tree's place. One rank has nothing
// to exchange: recursive doubling returns at once.
//
// Ranks that share a host take shared memory (collectives/shm/) first where it was measured
// faster (2 ranks, ferry-bench --vs-mpi, against the rows below it; docs/transports.md): every
// all_reduce (through the segment's slots up to 16 KiB, by single copy above: 64 KiB to
// 16 MiB took 0.57-0.67 of MPICH's time, where MPI's exchange took 0.82-0.93 and UCX's ring
// 0.60-0.78, the ring at par from 1 MiB), every barrier, every all_to_all_single: small blocks
// through the slots, larger ones by one copy: written by the sender where the receive block
// lies in shared memory, else read from the sender's buffer (process_vm_readv, or a
// mapping). With equal blocks,
// 2 ranks, 4 alternated rounds against the persistent request and MPI's exchange: 8 B 0.9 us
// against 1.1, 512 B 0.9 against 1.2, 4 KiB 1.0-1.2 against 1.6; above, the shm row as before.
// The split-size and laid-out forms ask with 0 bytes (their sizes differ across ranks) and so
// take the same row: torchrec's comm ops (3 alternated rounds, MPI) 512 B 3.3 -> 2.5 us,
// 64 KiB 9.6 -> 8.0, pooled 1 MiB 79 -> 64 (UCX: 2.9 -> 2.4, 79 -> 67); the DLRM step the
// same within its noise (2 MPI ranks, batch 512, 10 alternated rounds: 2.68 -> 2.70 ms; the
// loops scatter by +-3%).
//
// all_gather and broadcast (2 ranks, ferry-bench --vs-mpi, forced shm alternated with the
// automatic choice; docs/transports.md). Without MPI's collectives (UCX), shm at every size:
// all_gather 8 B 1.72-2.00 of MPICH's time against the ring's 2.36-2.38, 64 KiB to 16 MiB
// 0.54-1.00 against 1.00-1.73; broadcast at or below the tree (1 MiB 65-68 us against 98-132).
// With them, all_gather at every size (8 B 1.84-2.30 of MPICH's time against the persistent
// request's 2.28-2.52, 64 KiB 0.53-0.63 against the exchange's 0.80-0.82, 1 MiB 0.86-0.96
// against 1.03-1.23), and broadcast above the persistent request's 8 KiB (64 KiB 5.1-5.4 us
// against the exchange's 5.8-6.2; 1 MiB 62-65 us against 70-75 when timed alone; at 8 B the
// persistent request is faster, 1.07 us against 1.24). Above 4 MiB of all_gather output and
// 1 MiB of broadcast these rows were the exchange's until the large gather wrote into shared
// outputs: forced, alternated, medians of 3 rounds, out / in place in us, private tensors then
// shared ones (ferry-bench --op all_gather --sizes 16M,64M --memory both), 2 ranks: 16 MiB
// shm 872 / 374 against the exchange's 909 / 378, shared 740 / 250 against 1792 / 809; 64 MiB
// 4859 / 2118 against 4907 / 2142, shared 4765 / 2562 against 7474 / 5796 (2 more runs each
// gave the same order); on 4 ranks (2 cores) 16 MiB at par private
// (2710-2898 / 1936-2086 against 2647-3162 / 2090-2201), shared 3086-3263 / 2373-2437 against
// 4979-6521 / 4033-4285. Broadcast in place, 2 ranks: 2 MiB 89-90 against 93-95 us (shared
// 44-45 against 172-173), 16 MiB 960-982 against 1052 (shared 869-926 against 2772-2976); 4
// ranks against MPI's call: 2 MiB 275-303 against 610-2439, 16 MiB 2168-2507 against
// 3929-4292 (shared 3242-3628 against 8992-11700).
//
// reduce_scatter and reduce (the same runs with --op reduce_scatter,reduce): with MPI's
// collectives shm at every size (reduce_scatter 8 B 1.18-1.34 of MPICH's time against the
// persistent request's 1.52-1.63, 64 KiB to 16 MiB 0.36-0.73 against the exchange's 0.69-1.24;
// reduce 8 B 1.19-1.38 against MPI's call 2.44-3.32, 64 KiB to 16 MiB 0.29-0.79 against
// 0.75-1.55). Without them (UCX): reduce_scatter at every size (64 KiB 0.37 against the ring's
// 0.64-0.65, 1 MiB 0.58-0.63 against 0.68-0.71; above 1 MiB, once the large ops read their
// peers' buffers in place, shm took 0.60-0.75 of the ring's time at 2, 4 and 16 MiB out of place
// in three alternated rounds, and was faster in 23 of 24 pairs at 4-64 MiB, in and out of place);
// reduce through the slots and above 128 KiB (16 KiB 0.65-0.74 against the tree's
// 0.84-1.10, 256 KiB 0.16-0.19 against 0.31-0.40, 16 MiB 0.24-0.30 against 0.36-0.40), the
// tree between, whose one message beats the two halves' hand-offs there (64 KiB 0.36 against
// 0.54-0.61, 32 KiB 0.56-0.58 against 0.63-0.64, 128 KiB at par).
//
// Ranks on several hosts, some of which hold several of them (Placement::SharedHosts), take the
// hierarchical all_reduce above the small-payload rows where the transport has no collectives
// of its own: between hosts it sends each byte about once per host where the ring sends 3/2 of
// it (2 + 2 and 3 + 1 ranks, 512 KiB: 528 KB on a host's link against the ring's 792 KB,
// tests/hosts), in 2 (L-1) ring steps inside the hosts plus the rounds across them. Below 32 KiB
// the direct exchange and recursive doubling keep their one or log2 W rounds, which cross the
// slower link once per round either way. With MPI's collectives the rows stay MPI's own ways.
// reduce_scatter and all_gather take their hierarchical forms at every size there: a host's link
// carries W - L blocks where the flat ring's carries W - 1 (2 + 2: 2 against 3, tests/hosts), and
// crosses between hosts in one round instead of W - 1 steps. Over UCX on 2 simulated hosts x 2
// ranks at 10 Gbit/s it was faster in every one of five alternated rounds from 1 to 16 MiB
// (medians 0.57-0.87 of the ring's time), at 64 and 256 KiB 0.70-0.79, at par at 4 KiB.
// Timings on simulated hosts: docs/hosts.md.
constexpr size_t kShmSlotBytes = 16 * 1024;  // collectives/shm/shm_layout.h's kSlotBytes
using A = Algorithm;
constexpr Rule kShmAny{kAnyBytes, kAnyRanks, A::SharedMemory, 1, false, true};
constexpr Rule kHierarchicalAny{kAnyBytes, kAnyRanks, A::Hierarchical, 1, false, false, true};
constexpr std::array<Automatic, kCollectiveCount> kAutomaticRules = {{
    {{kShmAny,
      {4 * 1024, 8, A::Direct},
      {32 * 1024, kAnyRanks, A::RecursiveDoubling},
      {kAnyBytes, 1, A::RecursiveDoubling},
      kHierarchicalAny,
      {kAnyBytes, kAnyRanks, A::Ring}},
     {kShmAny,
      {kStaged, kAnyRanks, A::Persistent},
      {kAnyBytes, 4, A::Exchange, 2},
      {kAnyBytes, kAnyRanks, A::Native}}},                                    // all_reduce
    {{{kShmSlotBytes, kAnyRanks, A::SharedMemory, 1, false, true},
      {128 * 1024, kAnyRanks, A::Tree},
      kShmAny,
      {kAnyBytes, kAnyRanks, A::Tree}},
     {kShmAny, {kAnyBytes, kAnyRanks, A::Native}}},                           // reduce
    {{kShmAny,
      kHierarchicalAny,
      {kAnyBytes, kAnyRanks, A::Ring}},
     {kShmAny,
      {kStaged, kAnyRanks, A::Persistent},
      {kAnyBytes, 4, A::Exchange, 2},
      {kAnyBytes, kAnyRanks, A::Native}}},                                    // reduce_scatter
    {{kShmAny, kHierarchicalAny, {kAnyBytes, kAnyRanks, A::Ring}},
     {kShmAny,
      {kStaged, kAnyRanks, A::Persistent, 1, true},
      {kAnyBytes, 4, A::Exchange, 2},
      {kAnyBytes, kAnyRanks, A::Native}}},                                    // all_gather
    {{kShmAny, {kStaged, kAnyRanks, A::Pairwise}, {kAnyBytes, kAnyRanks, A::Pairwise}},
     {kShmAny,
      {kStaged, kAnyRanks, A::Persistent},
      {kAnyBytes, 4, A::Exchange, 2},
      {kAnyBytes, kAnyRanks, A::Native}}},                                    // all_to_all
    {{kShmAny, {kAnyBytes, kAnyRanks, A::Tree}},
     {{kStaged, kAnyRanks, A::Persistent},
      kShmAny,
      {kAnyBytes, 2, A::Exchange, 2},
      {kAnyBytes, kAnyRanks, A::Native}}},                                    // broadcast
    {{{kAnyBytes, kAnyRanks, A::Linear}}, {{kAnyBytes, kAnyRanks, A::Native}}},  // gather
    {{{kAnyBytes, kAnyRanks, A::Linear}}, {{kAnyBytes, kAnyRanks, A::Native}}},  // scatter
    {{kShmAny, {kAnyBytes, kAnyRanks, A::Dissemination}},
     {kShmAny,
      {kAnyBytes, kAnyRanks, A::Persistent},
      {kAnyBytes, kAnyRanks, A::Native}}},                                    // barrier
}};

const Automatic& automatic_rules(Collective c) { return kAutomaticRules[static_cast<size_t>(c)]; }

// The algorithms each collective has: the transport's own ways first, then point-to-point.
const std::vector<Algorithm>& algorithms_of(Collective c) {
  static const std::array<std::vector<Algorithm>, kCollectiveCount> table = {{
      {A::Native, A::Persistent, A::Exchange, A::Ring, A::RecursiveDoubling, A::Direct,
       A::SharedMemory, A::Hierarchical},
      {A::Native, A::Tree, A::SharedMemory},
      {A::Native, A::Persistent, A::Exchange, A::Ring, A::SharedMemory, A::Hierarchical},
      {A::Native, A::Persistent, A::Exchange, A::Ring, A::Direct, A::SharedMemory,
       A::Hierarchical},
      {A::Native, A::Persistent, A::Exchange, A::Pairwise, A::SharedMemory},
      {A::Native, A::Persistent, A::Exchange, A::Tree, A::SharedMemory},
      {A::Native, A::Linear},
      {A::Native, A::Linear},
      {A::Native, A::Persistent, A::Dissemination, A::SharedMemory},
  }};
  return table[static_cast<size_t>(c)];
}

// The overrides, one per collective, read on every op's issue: atomics, so that the issue path
// takes no lock once FERRY_ALGO has been parsed.
constexpr uint8_t kAutomatic = 0xff;
struct Overrides {
  std::mutex mu;  // parsing and replacing
  std::atomic<bool> loaded{false};
  std::array<std::atomic<uint8_t>, kCollectiveCount> algo{};
  // FERRY_MPI_PERSISTENT, FERRY_MPI_EXCHANGE: fixed for the process, read once here rather
  // than on every op's choice.
  const bool persistent_on = config().mpi_persistent;
  const bool exchange_on = config().mpi_exchange;
  Overrides() {
    for (auto& a : algo) a.store(kAutomatic, std::memory_order_relaxed);
  }
};

Overrides& overrides() {
  static Overrides o;
  return o;
}

std::string names(const std::vector<Algorithm>& algos, const char* sep) {
  std::string s;
  for (Algorithm a : algos) s.append(s.empty() ? "" : sep).append(algorithm_name(a));
  return s;
}

Collective collective_from_name(const std::string& name) {
  for (Collective c : kCollectives)
    if (name == collective_name(c)) return c;
  std::string valid;
  for (Collective c : kCollectives) valid.append(valid.empty() ? "" : ", ").append(collective_name(c));
  FERRY_THROW(InvalidArgument, "algorithm override: unknown collective '", name,
              "'; expected one of ", valid);
}

// Parses "op:algo,op:algo" (the strings' only reading); throws before changing anything.
// Two different algorithms for one collective are refused rather than the last one winning:
// a spec built by appending to another would otherwise silently lose a choice. The same entry
// twice is accepted, as it says nothing new.
std::array<uint8_t, kCollectiveCount> parse_spec(const std::string& spec) {
  std::array<uint8_t, kCollectiveCount> parsed;
  parsed.fill(kAutomatic);
  std::array<std::string, kCollectiveCount> entry_text{};  // the item that set parsed[i]
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    const auto colon = item.find(':');
    FERRY_CHECK(colon != std::string::npos, InvalidArgument, "algorithm override: expected ",
                "'collective:algorithm', given '", item, "'");
    const Collective c = collective_from_name(item.substr(0, colon));
    const std::string given = item.substr(colon + 1);
    const std::vector<Algorithm>& known = algorithms_of(c);
    const auto found = std::find_if(known.begin(), known.end(),
                                    [&](Algorithm a) { return given == algorithm_name(a); });
    FERRY_CHECK(found != known.end(), InvalidArgument, "algorithm override: ",
                collective_name(c), " has no algorithm '", given, "'; expected one of ",
                names(known, ", "));
    const size_t i = static_cast<size_t>(c);
    const uint8_t a = static_cast<uint8_t>(*found);
    FERRY_CHECK(parsed[i] == kAutomatic || parsed[i] == a, InvalidArgument,
                "algorithm override: '", entry_text[i], "' and '", item, "' give ",
                collective_name(c), " two algorithms; expected one entry per collective, given '",
                spec, "'");
    parsed[i] = a;
    entry_text[i] = item;
  }
  return parsed;
}

void store(Overrides& o, const std::array<uint8_t, kCollectiveCount>& parsed) {
  for (size_t i = 0; i < kCollectiveCount; ++i) o.algo[i].store(parsed[i], std::memory_order_relaxed);
  o.loaded.store(true, std::memory_order_release);
}

// FERRY_ALGO, parsed on first use. A spec that does not parse is not marked loaded, so every
// op fails with the same message rather than the first alone.
Overrides& loaded_overrides() {
  Overrides& o = overrides();
  if (!o.loaded.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(o.mu);
    if (!o.loaded.load(std::memory_order_relaxed)) store(o, parse_spec(config().algo));
  }
  return o;
}

// Whether the transport's way `a` is switched on (FERRY_MPI_PERSISTENT, FERRY_MPI_EXCHANGE):
// a switched-off way's rows are passed over, as the transport would pass it over.
bool switched_on(const Overrides& o, Algorithm a) {
  if (a == Algorithm::Persistent) return o.persistent_on;
  if (a == Algorithm::Exchange) return o.exchange_on;
  return true;
}

bool fits(const Overrides& o, const Rule& r, size_t bytes, int world_size, Placement placement) {
  if (r.one_host && placement != Placement::OneHost) return false;
  if (r.shared_hosts && placement != Placement::SharedHosts) return false;
  const size_t ranks = static_cast<size_t>(world_size);
  const bool small = !r.in_all ? bytes <= r.max_bytes
                               : r.max_bytes == kAnyBytes || bytes <= r.max_bytes / ranks;
  return small && world_size <= r.max_ranks && world_size >= r.min_ranks &&
         switched_on(o, r.algorithm);
}

Algorithm automatic(const Overrides& o, Collective c, size_t bytes, int world_size,
                    bool native, Placement placement) {
  const Rules& rules = native ? automatic_rules(c).native_rules : automatic_rules(c).rules;
  for (const Rule& r : rules)
    if (fits(o, r, bytes, world_size, placement)) return r.algorithm;
  return rules.back().algorithm;
}

std::string size_text(size_t bytes) {
  if (bytes % (1024 * 1024) == 0) return std::to_string(bytes / (1024 * 1024)) + " MiB";
  if (bytes % 1024 == 0) return std::to_string(bytes / 1024) + " KiB";
  return std::to_string(bytes) + " B";
}

// "direct if <= 4 KiB and <= 8 ranks; recursive_doubling if <= 32 KiB; ...; else ring".
std::string rule_text(const Rules& rules) {
  std::string text;
  for (const Rule& r : rules) {
    std::string when;
    if (r.max_bytes != kAnyBytes)
      when = "<= " + size_text(r.max_bytes) + (r.in_all ? " in all" : "");
    std::string ranks;
    if (r.min_ranks == r.max_ranks)
      ranks = std::to_string(r.max_ranks) + (r.max_ranks == 1 ? " rank" : " ranks");
    else if (r.min_ranks > 1 && r.max_ranks != kAnyRanks)
      ranks = std::to_string(r.min_ranks) + "-" + std::to_string(r.max_ranks) + " ranks";
    else if (r.max_ranks != kAnyRanks)
      ranks = "<= " + std::to_string(r.max_ranks) + " ranks";
    if (!ranks.empty()) when.append(when.empty() ? "" : " and ").append(ranks);
    if (r.one_host) when.append(when.empty() ? "" : " and ").append("ranks on one host");
    if (r.shared_hosts)
      when.append(when.empty() ? "" : " and ").append("ranks on several hosts, some sharing one");
    const std::string name = algorithm_name(r.algorithm);
    if (!switched_on(overrides(), r.algorithm)) continue;
    if (when.empty())
      text.append(text.empty() ? name : "; else " + name);
    else
      text.append(text.empty() ? "" : "; ").append(name + " if " + when);
  }
  return text;
}

}  // namespace

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::AllReduce: return "all_reduce";
    case Collective::Reduce: return "reduce";
    case Collective::ReduceScatter: return "reduce_scatter";
    case Collective::AllGather: return "all_gather";
    case Collective::AllToAll: return "all_to_all";
    case Collective::Broadcast: return "broadcast";
    case Collective::Gather: return "gather";
    case Collective::Scatter: return "scatter";
    case Collective::Barrier: return "barrier";
  }
  return "?";
}

const char* algorithm_name(Algorithm a) {
  switch (a) {
    case Algorithm::Native: return "native";
    case Algorithm::Ring: return "ring";
    case Algorithm::Tree: return "tree";
    case Algorithm::RecursiveDoubling: return "recursive_doubling";
    case Algorithm::Direct: return "direct";
    case Algorithm::Pairwise: return "pairwise";
    case Algorithm::Linear: return "linear";
    case Algorithm::Dissemination: return "dissemination";
    case Algorithm::Persistent: return "persistent";
    case Algorithm::Exchange: return "exchange";
    case Algorithm::SharedMemory: return "shm";
    case Algorithm::Hierarchical: return "hierarchical";
  }
  return "?";
}

const std::vector<Algorithm>& algorithms_for(Collective c) { return algorithms_of(c); }

// The algorithms of `c` that run without collectives of the transport's own.
std::vector<Algorithm> point_to_point(Collective c) {
  std::vector<Algorithm> p2p;
  for (Algorithm a : algorithms_of(c))
    if (!uses_native_collectives(a)) p2p.push_back(a);
  return p2p;
}

Algorithm choose_algorithm(Collective c, size_t bytes, int world_size, bool native,
                           Placement placement) {
  const Overrides& all = loaded_overrides();
  const uint8_t o = all.algo[static_cast<size_t>(c)].load(std::memory_order_relaxed);
  if (o == kAutomatic) return automatic(all, c, bytes, world_size, native, placement);
  const Algorithm a = static_cast<Algorithm>(o);
  if (a == Algorithm::SharedMemory && placement != Placement::OneHost) {
    std::vector<Algorithm> others = point_to_point(c);
    std::erase(others, Algorithm::SharedMemory);
    FERRY_THROW(InvalidArgument, "algorithm override: ", collective_name(c), ":shm, but this "
                "group's ranks do not all run on one host (or the transport cannot tell: the "
                "local transport, or a world made outside ferry::init); expected one of ",
                names(others, ", "), " (FERRY_ALGO or set_algorithm_override)");
  }
  if (uses_native_collectives(a) && !native)
    FERRY_THROW(InvalidArgument, "algorithm override: ", collective_name(c), ":",
                algorithm_name(a), ", but this group's transport has no collectives of its "
                "own; expected one of ", names(point_to_point(c), ", "),
                " (FERRY_ALGO or set_algorithm_override)");
  return a;
}

Algorithm automatic_algorithm(Collective c, size_t bytes, int world_size, bool native) {
  return automatic(loaded_overrides(), c, bytes, world_size, native, Placement::Unknown);
}

void detail::load_algorithm_overrides() { loaded_overrides(); }

void detail::check_algorithm_overrides(bool native, const std::string& transport) {
  if (native) return;
  Overrides& o = loaded_overrides();
  for (Collective c : kCollectives) {
    const uint8_t v = o.algo[static_cast<size_t>(c)].load(std::memory_order_relaxed);
    if (v == kAutomatic || !uses_native_collectives(static_cast<Algorithm>(v))) continue;
    FERRY_THROW(InvalidArgument, "algorithm override: ", collective_name(c), ":",
                algorithm_name(static_cast<Algorithm>(v)), " is one of a transport's own ways, "
                "but the ", transport, " transport has no collectives of its own; expected one "
                "of ", names(point_to_point(c), ", "), " (FERRY_ALGO or set_algorithm_override)");
  }
}

void set_algorithm_override(const std::string& spec) {
  const auto parsed = parse_spec(spec);
  Overrides& o = overrides();
  std::lock_guard<std::mutex> lock(o.mu);
  store(o, parsed);  // an explicit setting replaces FERRY_ALGO
}

std::string algorithm_table() {
  Overrides& o = loaded_overrides();
  using Row = std::array<std::string, 5>;
  std::vector<Row> rows = {{"collective", "algorithms", "automatic: local, ucx",
                            "automatic: mpi (collectives of its own)", "override"}};
  for (Collective c : kCollectives) {
    const uint8_t v = o.algo[static_cast<size_t>(c)].load(std::memory_order_relaxed);
    rows.push_back({collective_name(c), names(algorithms_of(c), "|"),
                    rule_text(automatic_rules(c).rules),
                    rule_text(automatic_rules(c).native_rules),
                    v == kAutomatic ? "-" : algorithm_name(static_cast<Algorithm>(v))});
  }
  std::array<size_t, 5> width{};
  for (const Row& r : rows)
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  std::ostringstream os;
  for (const Row& r : rows) {
    for (size_t i = 0; i + 1 < r.size(); ++i)
      os << r[i] << std::string(width[i] + 2 - r[i].size(), ' ');
    os << r.back() << "\n";
  }
  os << "(sizes are per rank's input; a way an op cannot take falls to the next of persistent, "
        "exchange, native; FERRY_MPI_PERSISTENT=0 / FERRY_MPI_EXCHANGE=0 drop those rows)\n";
  return os.str();
}

}  // namespace ferry
