#include <ferry/collectives/algorithm_table.h>

#include <ferry/runtime/config.h>
#include <ferry/runtime/error.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
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
                                    Algorithm::Linear,    Algorithm::Dissemination};
static_assert(kAlgorithms.size() == kAlgorithmCount);

constexpr size_t kAnyBytes = SIZE_MAX;
constexpr int kAnyRanks = INT32_MAX;

// One row of a collective's automatic rule: the first row whose limits the op fits decides.
struct Rule {
  size_t max_bytes;  // per rank's input
  int max_ranks;
  Algorithm algorithm;
};

struct Entry {
  std::vector<Algorithm> algorithms;  // Native first, then the point-to-point ones
  std::vector<Rule> rules;            // without native collectives; the last row takes any op
};

// Up to 4 KiB per rank and 8 ranks, all_reduce takes the direct exchange: every rank sends its
// payload to every other rank at once and combines all of them, one round whose sends and
// receives can all be posted when the op is issued (direct_all_reduce.cpp here, and
// collectives/ops/direct_post.h). Up to 32 KiB, recursive doubling (log2 W exchange rounds of
// the whole payload: as many bytes as a binomial tree's reduce then broadcast, in half the
// rounds); above, the ring (2 (W-1) messages of 1/W of it). The 32 KiB bound was measured
// between the binomial tree and the ring (where they cost about the same on one host with the
// local transport) and kept when recursive doubling took the tree's place. One rank has nothing
// to exchange: recursive doubling returns at once.
const Entry& entry(Collective c) {
  using A = Algorithm;
  static const std::array<Entry, kCollectiveCount> table = {{
      {{A::Native, A::Ring, A::Tree, A::RecursiveDoubling, A::Direct},
       {{4 * 1024, 8, A::Direct},
        {32 * 1024, kAnyRanks, A::RecursiveDoubling},
        {kAnyBytes, 1, A::RecursiveDoubling},
        {kAnyBytes, kAnyRanks, A::Ring}}},                                    // all_reduce
      {{A::Native, A::Tree}, {{kAnyBytes, kAnyRanks, A::Tree}}},              // reduce
      {{A::Native, A::Ring}, {{kAnyBytes, kAnyRanks, A::Ring}}},              // reduce_scatter
      {{A::Native, A::Ring, A::Direct}, {{kAnyBytes, kAnyRanks, A::Ring}}},   // all_gather
      {{A::Native, A::Pairwise}, {{kAnyBytes, kAnyRanks, A::Pairwise}}},      // all_to_all
      {{A::Native, A::Tree}, {{kAnyBytes, kAnyRanks, A::Tree}}},              // broadcast
      {{A::Native, A::Linear}, {{kAnyBytes, kAnyRanks, A::Linear}}},          // gather
      {{A::Native, A::Linear}, {{kAnyBytes, kAnyRanks, A::Linear}}},          // scatter
      {{A::Native, A::Dissemination}, {{kAnyBytes, kAnyRanks, A::Dissemination}}},  // barrier
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
    const std::vector<Algorithm>& known = entry(c).algorithms;
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

Algorithm automatic(Collective c, size_t bytes, int world_size) {
  for (const Rule& r : entry(c).rules)
    if (bytes <= r.max_bytes && world_size <= r.max_ranks) return r.algorithm;
  return entry(c).rules.back().algorithm;
}

std::string size_text(size_t bytes) {
  if (bytes % 1024 == 0) return std::to_string(bytes / 1024) + " KiB";
  return std::to_string(bytes) + " B";
}

// "direct if <= 4 KiB and <= 8 ranks; recursive_doubling if <= 32 KiB; ...; else ring".
std::string rule_text(Collective c) {
  std::string text;
  for (const Rule& r : entry(c).rules) {
    std::string when;
    if (r.max_bytes != kAnyBytes) when = "<= " + size_text(r.max_bytes);
    if (r.max_ranks != kAnyRanks)
      when.append(when.empty() ? "" : " and ")
          .append(r.max_ranks == 1 ? "1 rank" : "<= " + std::to_string(r.max_ranks) + " ranks");
    const std::string name = algorithm_name(r.algorithm);
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
  }
  return "?";
}

const std::vector<Algorithm>& algorithms_for(Collective c) { return entry(c).algorithms; }

Algorithm choose_algorithm(Collective c, size_t bytes, int world_size, bool native) {
  const uint8_t o =
      loaded_overrides().algo[static_cast<size_t>(c)].load(std::memory_order_relaxed);
  if (o == kAutomatic) return native ? Algorithm::Native : automatic(c, bytes, world_size);
  const Algorithm a = static_cast<Algorithm>(o);
  if (a == Algorithm::Native && !native) {
    std::vector<Algorithm> p2p(entry(c).algorithms.begin() + 1, entry(c).algorithms.end());
    FERRY_THROW(InvalidArgument, "algorithm override: ", collective_name(c),
                ":native, but this group's transport has no collectives of its own; expected ",
                "one of ", names(p2p, ", "), " (FERRY_ALGO or set_algorithm_override)");
  }
  return a;
}

void detail::load_algorithm_overrides() { loaded_overrides(); }

void set_algorithm_override(const std::string& spec) {
  const auto parsed = parse_spec(spec);
  Overrides& o = overrides();
  std::lock_guard<std::mutex> lock(o.mu);
  store(o, parsed);  // an explicit setting replaces FERRY_ALGO
}

std::string algorithm_table() {
  Overrides& o = loaded_overrides();
  struct Row {
    std::string name, algos, rule, over;
  };
  std::vector<Row> rows;
  Row head{"collective", "algorithms", "automatic choice without native collectives", "override"};
  size_t w0 = head.name.size(), w1 = head.algos.size(), w2 = head.rule.size();
  for (Collective c : kCollectives) {
    const uint8_t v = o.algo[static_cast<size_t>(c)].load(std::memory_order_relaxed);
    rows.push_back({collective_name(c), names(entry(c).algorithms, "|"), rule_text(c),
                    v == kAutomatic ? "-" : algorithm_name(static_cast<Algorithm>(v))});
    w0 = std::max(w0, rows.back().name.size());
    w1 = std::max(w1, rows.back().algos.size());
    w2 = std::max(w2, rows.back().rule.size());
  }
  std::ostringstream os;
  auto line = [&](const Row& r) {
    os << r.name << std::string(w0 + 2 - r.name.size(), ' ') << r.algos
       << std::string(w1 + 2 - r.algos.size(), ' ') << r.rule
       << std::string(w2 + 2 - r.rule.size(), ' ') << r.over << "\n";
  };
  line(head);
  for (const Row& r : rows) line(r);
  os << "(sizes are per rank's input; on a transport with collectives of its own (mpi) the "
        "automatic choice is native for every collective)\n";
  return os.str();
}

}  // namespace ferry
