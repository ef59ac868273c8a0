#include <ferry/collectives/algorithm_table.h>

#include <ferry/runtime/config.h>
#include <ferry/runtime/error.h>

#include <array>
#include <mutex>
#include <sstream>

namespace ferry {
namespace {

constexpr std::array kCollectives = {Collective::AllReduce, Collective::Reduce,
                                     Collective::ReduceScatter, Collective::AllGather,
                                     Collective::AllToAll,  Collective::Broadcast,
                                     Collective::Gather,    Collective::Scatter,
                                     Collective::Barrier};
constexpr size_t kCount = kCollectives.size();

// Below this many bytes per rank, all_reduce takes recursive doubling (log2 W exchange rounds
// of the whole payload; it replaced the binomial tree, which moves as many bytes in twice the
// rounds); above, the ring (2 (W-1) messages of 1/W of it). 32 KiB is where tree and ring cost
// about the same on one host with the local transport.
constexpr size_t kSmallAllReduceMaxBytes = 32 * 1024;
// Up to this many bytes per rank and ranks, all_reduce takes the direct exchange: every rank
// sends its payload to every other rank at once and combines all of them, one round whose
// sends and receives can all be posted when the op is issued (direct_all_reduce.cpp here, and
// collectives/ops/direct_issue.h).
constexpr size_t kDirectAllReduceMaxBytes = 4 * 1024;
constexpr int kDirectAllReduceMaxRanks = 8;

struct Overrides {
  std::mutex mu;
  std::array<std::string, kCount> algo;  // empty: automatic
  bool env_read = false;
};

Overrides& overrides() {
  static Overrides o;
  return o;
}

size_t index_of(Collective c) { return static_cast<size_t>(c); }

Collective collective_from_name(const std::string& name) {
  for (Collective c : kCollectives)
    if (name == collective_name(c)) return c;
  std::string valid;
  for (Collective c : kCollectives) valid += std::string(valid.empty() ? "" : ", ") + collective_name(c);
  FERRY_THROW(InvalidArgument, "algorithm override: unknown collective '", name,
              "'; expected one of ", valid);
}

// Parses "op:algo,op:algo" into `into`; throws before changing anything on a bad spec.
// Two different algorithms for one collective are refused rather than the last one winning:
// a spec built by appending to another would otherwise silently lose a choice. The same entry
// twice is accepted, as it says nothing new.
void parse_spec(const std::string& spec, std::array<std::string, kCount>& into) {
  std::array<std::string, kCount> parsed{};
  std::array<std::string, kCount> entry{};  // the item that set parsed[i], for the message
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    auto colon = item.find(':');
    FERRY_CHECK(colon != std::string::npos, InvalidArgument, "algorithm override: expected ",
                "'collective:algorithm', given '", item, "'");
    Collective c = collective_from_name(item.substr(0, colon));
    std::string algo = item.substr(colon + 1);
    const auto& known = algorithms_for(c);
    bool ok = false;
    std::string valid;
    for (const auto& a : known) {
      ok = ok || a == algo;
      valid += (valid.empty() ? "" : ", ") + a;
    }
    FERRY_CHECK(ok, InvalidArgument, "algorithm override: ", collective_name(c),
                " has no algorithm '", algo, "'; expected one of ", valid);
    const size_t i = index_of(c);
    FERRY_CHECK(parsed[i].empty() || parsed[i] == algo, InvalidArgument,
                "algorithm override: '", entry[i], "' and '", item, "' give ", collective_name(c),
                " two algorithms; expected one entry per collective, given '", spec, "'");
    parsed[i] = algo;
    entry[i] = item;
  }
  into = parsed;
}

std::string override_for(Collective c) {
  Overrides& o = overrides();
  std::lock_guard<std::mutex> lock(o.mu);
  if (!o.env_read) {
    o.env_read = true;
    parse_spec(config().algo, o.algo);
  }
  return o.algo[index_of(c)];
}

std::string automatic(Collective c, size_t bytes, int world_size) {
  switch (c) {
    case Collective::AllReduce:
      if (bytes <= kDirectAllReduceMaxBytes && world_size <= kDirectAllReduceMaxRanks)
        return "direct";
      return (bytes <= kSmallAllReduceMaxBytes || world_size <= 1) ? "recursive_doubling"
                                                                   : "ring";
    default:
      return algorithms_for(c).front();
  }
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

const std::vector<std::string>& algorithms_for(Collective c) {
  static const std::array<std::vector<std::string>, kCount> table = {{
      {"ring", "tree", "recursive_doubling", "direct"},  // all_reduce
      {"tree"},          // reduce
      {"ring"},          // reduce_scatter
      {"ring", "direct"},  // all_gather
      {"pairwise"},      // all_to_all
      {"tree"},          // broadcast
      {"linear"},        // gather
      {"linear"},        // scatter
      {"dissemination"},  // barrier
  }};
  return table[index_of(c)];
}

std::string choose_algorithm(Collective c, size_t bytes, int world_size) {
  std::string o = override_for(c);
  return o.empty() ? automatic(c, bytes, world_size) : o;
}

void set_algorithm_override(const std::string& spec) {
  Overrides& o = overrides();
  std::lock_guard<std::mutex> lock(o.mu);
  o.env_read = true;  // an explicit setting replaces FERRY_ALGO
  parse_spec(spec, o.algo);
}

std::string algorithm_table() {
  std::ostringstream os;
  os << "collective      algorithms         automatic choice              override\n";
  for (Collective c : kCollectives) {
    std::string algos;
    for (const auto& a : algorithms_for(c)) algos += (algos.empty() ? "" : "|") + a;
    std::string rule = c == Collective::AllReduce
                           ? "direct <= 4 KiB (<= 8 ranks) < recursive_doubling <= 32 KiB < ring"
                           : algorithms_for(c).front();
    std::string o = override_for(c);
    os << collective_name(c) << std::string(16 - std::string(collective_name(c)).size(), ' ')
       << algos << std::string(algos.size() < 19 ? 19 - algos.size() : 1, ' ') << rule
       << std::string(rule.size() < 30 ? 30 - rule.size() : 1, ' ') << (o.empty() ? "-" : o)
       << "\n";
  }
  return os.str();
}

}  // namespace ferry
