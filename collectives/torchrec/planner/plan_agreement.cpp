#include <ferry/collectives/torchrec/planner/plan_agreement.h>

#include <ferry/collectives/collectives.h>
#include <ferry/collectives/torchrec/comm/collective_utils.h>
#include <ferry/collectives/torchrec/utils/format.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/tensor.h>

#include <cstring>
#include <map>
#include <sstream>

namespace ferry::torchrec {

namespace {

// Lines of ShardingPlan::to_string keyed by (module, table).
std::map<std::pair<std::string, std::string>, std::string> lines_of(const std::string& text) {
  std::map<std::pair<std::string, std::string>, std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const auto a = line.find('\t');
    const auto b = line.find('\t', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    out[{line.substr(0, a), line.substr(a + 1, b - a - 1)}] = line.substr(b + 1);
  }
  return out;
}

// The first (module, table) where the two texts differ, described.
std::string first_difference(const std::string& ref_text, int ref_rank, const std::string& text,
                             int rank) {
  const auto ref = lines_of(ref_text);
  const auto mine = lines_of(text);
  auto say = [&](const std::pair<std::string, std::string>& key, const std::string* a,
                 const std::string* b) {
    return "module '" + key.first + "', table '" + key.second + "': rank " +
           std::to_string(ref_rank) + " has " + (a ? "'" + *a + "'" : std::string("no entry")) +
           ", rank " + std::to_string(rank) + " has " +
           (b ? "'" + *b + "'" : std::string("no entry"));
  };
  for (const auto& [key, line] : ref) {
    auto it = mine.find(key);
    if (it == mine.end()) return say(key, &line, nullptr);
    if (it->second != line) return say(key, &line, &it->second);
  }
  for (const auto& [key, line] : mine)
    if (!ref.count(key)) return say(key, nullptr, &line);
  return "the plans' texts are equal but their fingerprints differ";
}

}  // namespace

uint64_t plan_fingerprint(const ShardingPlan& plan) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : plan.to_string()) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

void check_plan_agreement(const ShardingPlan& plan, const Group& group) {
  detail::check_group(group, "torchrec check_plan_agreement");
  const int w = group.size();
  const uint64_t mine = plan_fingerprint(plan);
  Tensor in = from_vector<int64_t>({0});
  std::memcpy(in.data<int64_t>(), &mine, sizeof mine);
  Tensor all = zeros({w}, DType::Int64);
  all_gather(in, all, group).wait();
  std::vector<uint64_t> prints(static_cast<size_t>(w));
  std::memcpy(prints.data(), all.data<int64_t>(), sizeof(uint64_t) * prints.size());

  // The reference: the fingerprint most members hold; ties go to the lowest rank's.
  int ref_rank = 0;
  int best = 0;
  for (int r = 0; r < w; ++r) {
    int count = 0;
    for (int k = 0; k < w; ++k) count += prints[static_cast<size_t>(k)] == prints[static_cast<size_t>(r)];
    if (count > best) best = count, ref_rank = r;
  }
  std::vector<int> same, differ;
  for (int r = 0; r < w; ++r)
    (prints[static_cast<size_t>(r)] == prints[static_cast<size_t>(ref_rank)] ? same : differ)
        .push_back(r);
  if (differ.empty()) return;

  // Every member saw the same fingerprints, so every member gathers the texts.
  const std::string text = plan.to_string();
  Tensor bytes = empty({static_cast<int64_t>(text.size())}, DType::UInt8);
  if (!text.empty()) std::memcpy(bytes.data<uint8_t>(), text.data(), text.size());
  Work gathered = all_gather_v(bytes, group);
  gathered.wait();
  const Tensor texts = gathered.output(0);
  const Tensor sizes = gathered.output(1);
  std::vector<std::string> per_rank(static_cast<size_t>(w));
  int64_t at = 0;
  for (int r = 0; r < w; ++r) {
    const int64_t n = sizes.data<int64_t>()[r];
    per_rank[static_cast<size_t>(r)].assign(
        reinterpret_cast<const char*>(texts.data<uint8_t>()) + at, static_cast<size_t>(n));
    at += n;
  }
  const int first = differ.front();
  FERRY_THROW(MismatchError, "torchrec plan: the plans differ across ranks (checked ",
              detail::where("check_plan_agreement", group), "): ranks ", detail::compact_list_str(differ),
              " differ from rank ", ref_rank, "'s plan (held by ranks ", detail::compact_list_str(same), "); rank ",
              first, ": ",
              first_difference(per_rank[static_cast<size_t>(ref_rank)], ref_rank,
                               per_rank[static_cast<size_t>(first)], first));
}

ShardingPlan broadcast_plan(const ShardingPlan& plan, const Group& group, int source) {
  return invoke_on_rank_and_broadcast_result(group, source, [&] { return plan; });
}

}  // namespace ferry::torchrec
