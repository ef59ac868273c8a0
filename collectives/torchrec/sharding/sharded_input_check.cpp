#include <ferry/collectives/torchrec/sharding/sharded_input_check.h>

#include <ferry/collectives/collectives.h>
#include <ferry/collectives/torchrec/modules/vbe_pooling.h>
#include <ferry/collectives/torchrec/utils/format.h>
#include <ferry/runtime/error.h>

#include <algorithm>
#include <array>
#include <map>
#include <sstream>

namespace ferry::torchrec::detail {

namespace {

// The first word of a rank's status. The numbers travel between ranks: keep them.
enum InputProblem : int64_t {
  kOk = 0,
  kMissingFeature = 1,       // feature = the configured feature missing from the keys
  kIdOutOfRange = 2,         // feature, sample, id
  kWeightsMissing = 3,       // a weighted collection, a KJT without weights
  kVariableStride = 4,       // VBE given to a collection that refuses it
  kWeightsUnweighted = 5,    // per-sample weights given to an unweighted collection
  kWeightsMismatch = 6,      // sample = the weights' numel, id = the KJT's value count
  kBadInverseIndices = 7,    // VBE without valid inverse indices (this rank says more)
};

// What is wrong with the caller's per-sample weights Variable.
InputProblem weights_problem(const KeyedJaggedTensor& kjt, bool weighted, const Variable& weights) {
  if (!weights.defined()) return kOk;
  if (!weighted) return kWeightsUnweighted;
  if (kjt.has_weights() && (weights.value().numel() != kjt.values().numel() ||
                            weights.value().dtype() != kjt.weights().dtype()))
    return kWeightsMismatch;
  return kOk;
}

// The problems of the batch's layout (VBE, weights), in the order they are reported; kOk when
// there is none. vbe_error gets this rank's own inverse-indices message.
// A rank's status words (InputCheckStatus::kWords): returned by value, no list per batch.
using Words = std::array<int64_t, InputCheckStatus::kWords>;

Words layout_problem(const ShardedTables& tables, const KeyedJaggedTensor& kjt,
                                    bool weighted, const Variable& weights, bool allow_vbe,
                                    const char* where, int64_t grad_flag, std::string& vbe_error) {
  if (kjt.variable_stride_per_key()) {
    if (!allow_vbe) return {kVariableStride, 0, 0, 0, grad_flag};
    try {
      inverse_rows(kjt, tables.features(), where, tables.world());
    } catch (const InvalidArgument& e) {
      vbe_error = e.what();
      return {kBadInverseIndices, 0, 0, 0, grad_flag};
    }
  }
  if (weighted && !kjt.has_weights()) return {kWeightsMissing, 0, 0, 0, grad_flag};
  const InputProblem w = weights_problem(kjt, weighted, weights);
  if (w != kOk) return {w, 0, weights.value().numel(), kjt.values().numel(), grad_flag};
  return {kOk, 0, 0, 0, grad_flag};
}

// The first missing feature or id out of range, by feature in config order. Each feature's ids
// are read straight from the KJT's values (no per-feature views: this runs on every batch). The
// keys are usually the features in order; otherwise they are looked up by name.
Words id_problem(const ShardedTables& tables, const KeyedJaggedTensor& kjt,
                                int64_t grad_flag) {
  const std::vector<std::string>& features = tables.features();
  const std::vector<std::string>& keys = kjt.keys();
  const bool same_order = keys.size() >= features.size() &&
                          std::equal(features.begin(), features.end(), keys.begin());
  std::map<std::string, int64_t> index;
  if (!same_order) index = kjt.index_per_key();
  const std::vector<int64_t>& key_offsets = kjt.offset_per_key();
  const int64_t* all_ids = kjt.values().data<int64_t>();
  for (size_t f = 0; f < features.size(); ++f) {
    int64_t key = static_cast<int64_t>(f);
    if (!same_order) {
      auto it = index.find(features[f]);
      if (it == index.end()) return {kMissingFeature, static_cast<int64_t>(f), 0, 0, grad_flag};
      key = it->second;
    }
    const int64_t rows =
        tables.tables()[static_cast<size_t>(tables.feature_table()[f])].config.num_embeddings;
    const auto k = static_cast<size_t>(key);
    const int64_t* ids = all_ids + key_offsets[k];
    const int64_t n = key_offsets[k + 1] - key_offsets[k];
    // An id is in range when neither it nor rows - 1 - id has its top bit set (in unsigned
    // arithmetic, which wraps instead of overflowing): one OR of the two over all ids says
    // whether any is out, in a loop without an early exit, which the compiler runs in whole
    // registers (this runs on every batch, over every id). Only when one is out of range is the
    // first bad id, and its sample, searched for.
    const auto last = static_cast<uint64_t>(rows - 1);
    uint64_t signs = 0;
    for (int64_t i = 0; i < n; ++i) {
      const auto id = static_cast<uint64_t>(ids[i]);
      signs |= id | (last - id);
    }
    if (signs >> 63 != 0) {
      int64_t bad = 0;
      while (ids[bad] >= 0 && ids[bad] < rows) ++bad;
      const Tensor lengths = kjt[features[f]].lengths();
      int64_t b = 0, end = lengths.numel() > 0 ? static_cast<int64_t>(lengths.get_flat(0)) : 0;
      while (bad >= end && b + 1 < lengths.numel())
        end += static_cast<int64_t>(lengths.get_flat(++b));
      return {kIdOutOfRange, static_cast<int64_t>(f), b, ids[bad], grad_flag};
    }
  }
  return {kOk, 0, 0, 0, grad_flag};
}

// The message of rank r's problem (its words s), after "<where>: rank r's input: ".
std::string describe_problem(const ShardedTables& tables, const int64_t* s) {
  const size_t f = static_cast<size_t>(std::max<int64_t>(s[1], 0));
  const std::string& feature = tables.features()[f];
  const EmbeddingBagConfig& cfg =
      tables.tables()[static_cast<size_t>(tables.feature_table()[f])].config;
  std::ostringstream os;
  switch (s[0]) {
    case kMissingFeature:
      os << "feature \"" << feature << "\" (table \"" << cfg.name
         << "\") is configured but missing from the KJT's keys";
      break;
    case kIdOutOfRange:
      os << "table \"" << cfg.name << "\", feature \"" << feature << "\", sample " << s[2]
         << ": id " << s[3] << " is out of range [0, " << cfg.num_embeddings << ")";
      break;
    case kWeightsMissing: os << "the collection is weighted but the KJT has no weights"; break;
    case kWeightsUnweighted: os << "per_sample_weights given to an unweighted collection"; break;
    case kWeightsMismatch:
      os << "per_sample_weights must have the KJT's weights' dtype and one element per value ("
         << s[3] << "), got " << s[2] << " elements";
      break;
    default: {
      // VBE goes through every pooled sharding type and through no sequence sharding (as in
      // torchrec): say so, with the sharding types the batch would have gone through.
      std::string types;
      for (const auto& t : tables.tables()) {
        const std::string name(to_string(t.sharding.sharding_type));
        if (types.find(name) == std::string::npos) types += (types.empty() ? "" : ", ") + name;
      }
      os << "a variable stride per key (VBE, stride_per_key_per_rank) is not supported by a "
            "sharded EmbeddingCollection (torchrec raises too); sharding types of this "
            "collection: "
         << types;
    }
  }
  return os.str();
}

}  // namespace

void check_input(const ShardedTables& tables, const KeyedJaggedTensor& kjt, bool weighted,
                 const char* where, const Variable& weights, bool allow_vbe) {
  const Group& world = tables.world();
  if (!tables.options().check_inputs) {
    // The caller's weights Variable: local facts, raised on this rank alone when the collective
    // check is off (the verdict raises them on every rank otherwise).
    const InputProblem weights_status = weights_problem(kjt, weighted, weights);
    FERRY_CHECK(weights_status == kOk, InvalidArgument, detail::where(where, world),
                weights_status == kWeightsUnweighted
                    ? ": per_sample_weights given to an unweighted collection"
                    : ": per_sample_weights must have the KJT's weights' dtype and one element "
                      "per value (" +
                          std::to_string(kjt.values().numel()) + "), got " +
                          std::to_string(weights.value().numel()));
    return;
  }
  const InputCheckStatus mine = input_status(tables, kjt, weighted, weights, allow_vbe, where);
  std::vector<int64_t> all = mine.words;
  if (world.size() > 1) {
    Tensor out =
        zeros({static_cast<int64_t>(world.size()) * InputCheckStatus::kWords}, DType::Int64);
    all_gather(from_vector(mine.words), out, world).wait();
    all = out.to_vector<int64_t>();
  }
  raise_input_status(tables, all, mine, where);
}

InputCheckStatus input_status(const ShardedTables& tables, const KeyedJaggedTensor& kjt,
                              bool weighted, const Variable& weights, bool allow_vbe,
                              const char* where) {
  const int64_t grad_flag = weights.defined() && weights.requires_grad() ? 1 : 0;
  InputCheckStatus out;
  Words words =
      layout_problem(tables, kjt, weighted, weights, allow_vbe, where, grad_flag, out.vbe_error);
  if (words[0] == kOk) words = id_problem(tables, kjt, grad_flag);
  out.words.assign(words.begin(), words.end());
  return out;
}

void raise_input_status(const ShardedTables& tables, const std::vector<int64_t>& all,
                        const InputCheckStatus& mine, const char* where) {
  constexpr int kWords = InputCheckStatus::kWords;
  FERRY_CHECK(all.size() % kWords == 0, InvalidArgument, where, ": the input check's words "
              "must be ", kWords, " per rank, got ", all.size());
  const int ranks = static_cast<int>(all.size() / kWords);
  for (int r = 0; r < ranks; ++r) {
    const int64_t* s = &all[static_cast<size_t>(r) * kWords];
    if (s[0] == kOk) continue;
    if (s[0] == kBadInverseIndices) {
      FERRY_CHECK(r != tables.world().rank(), InvalidArgument, mine.vbe_error);
      FERRY_THROW(InvalidArgument, where, ": rank ", r,
                  "'s input: its VBE inverse_indices are missing or invalid (rank ", r,
                  " raises the details)");
    }
    FERRY_THROW(InvalidArgument, where, ": rank ", r, "'s input: ", describe_problem(tables, s));
  }
  // The weights' gradient goes back through a collective: every rank or none.
  std::string with, without;
  for (int r = 0; r < ranks; ++r) {
    std::string& list = all[static_cast<size_t>(r) * kWords + 4] ? with : without;
    list += ' ';
    list += std::to_string(r);
  }
  FERRY_CHECK(with.empty() || without.empty(), InvalidArgument, where,
              ": the ranks disagree on whether the per-sample weights require grad (they do on "
              "rank(s)", with, ", not on rank(s)", without,
              "); their gradient goes back through the input dist, a collective");
}

}  // namespace ferry::torchrec::detail
