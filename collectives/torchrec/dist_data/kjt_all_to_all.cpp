#include <ferry/collectives/torchrec/dist_data/kjt_all_to_all.h>

#include <ferry/collectives/collectives.h>
#include <ferry/collectives/shm/shm_ops.h>
#include <ferry/collectives/torchrec/sparse/jagged_kernels.h>
#include <ferry/collectives/torchrec/sparse/kjt_dist.h>
#include <ferry/collectives/torchrec/utils/format.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/object_pool.h>

#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <string_view>
#include <utility>

namespace ferry::torchrec {

using detail::list_str;

namespace {

constexpr const char* kWhere = "KJTAllToAll";

// The phase-1 record, int64 words. Label slots are fixed so that the record has the same size on
// every rank whatever its labels (a rank with weights and one without must reach the checks,
// not a size mismatch inside the collective).
constexpr int64_t kMagic = 0x4b4a5441'32706831;  // "KJTA2ph1"
enum Word : int64_t { kMagicWord, kStatus, kKeysFp, kSplitsFp, kFlags, kStride, kLimit, kHeader };
enum Slot : int64_t { kLengths, kValues, kStrides, kWeights, kSlots };
constexpr const char* kSlotLabel[kSlots] = {"lengths", "values", "strides", "weights"};

// After the label slots: the values this rank holds for every key (its length_per_key, sum(splits)
// words), from which every receiver knows where each (source, key) segment lands before phase 2.
int64_t record_words(int W, int64_t num_keys) { return kHeader + kSlots * W + num_keys; }

enum Status : int64_t { kOk = 0, kKeySplits = 1, kBadInput = 2 };

const char* status_text(int64_t s) {
  switch (s) {
    case kKeySplits: return "its key splits do not cover its keys";
    case kBadInput: return "its KJT could not be prepared for sending";
    default: return "unknown status";
  }
}

// FNV-1a, 64-bit, with a separator so that ["ab", "c"] and ["a", "bc"] differ.
struct Fnv {
  uint64_t h = 1469598103934665603ull;
  void byte(unsigned char c) {
    h ^= c;
    h *= 1099511628211ull;
  }
  void str(std::string_view s) {
    for (char c : s) byte(static_cast<unsigned char>(c));
    byte(0xff);
  }
  void i64(int64_t v) {
    for (int i = 0; i < 8; ++i) byte(static_cast<unsigned char>(static_cast<uint64_t>(v) >> (8 * i)));
  }
  int64_t value() const { return static_cast<int64_t>(h); }
};

int64_t slot_of(const std::string& label) {
  for (int64_t s = 0; s < kSlots; ++s)
    if (label == kSlotLabel[s]) return s;
  FERRY_THROW(InvalidArgument, kWhere, ": unknown label ", label);
}

}  // namespace

namespace detail {

// The lists a KJTAllToAll call fills, kept by the calling thread from one call to the next
// (ThreadSpares): a training step's call then refills them instead of allocating them again.
struct KjtA2aLists {
  std::vector<std::string> labels;
  std::vector<Tensor> send;                         // per label
  std::vector<std::vector<int64_t>> input_splits;   // [label][dest]
  std::vector<std::string> keys_out;
  std::vector<const int64_t*> records;              // per source: its phase-1 record
  std::vector<std::vector<int64_t>> output_splits;  // [label][source]
  std::vector<int64_t> stride_per_rank;
  std::vector<int64_t> seg_values;  // [s K + t]: values rank s sends me for my t-th key
  std::vector<int64_t> seg_lpos;    // [s K + t]: where that segment's lengths start in the result
  std::vector<int64_t> seg_vpos;    // [s K + t]: where its values start
  std::vector<Tensor> out;          // per label: the result's (uniform stride) or the staging
  std::vector<Work> phase2;

  // Empties every list (the nested ones inside their outer list), keeping the capacity.
  void clear() {
    labels.clear();
    send.clear();
    for (auto& l : input_splits) l.clear();
    keys_out.clear();
    records.clear();
    for (auto& l : output_splits) l.clear();
    stride_per_rank.clear();
    seg_values.clear();
    seg_lpos.clear();
    seg_vpos.clear();
    out.clear();
    phase2.clear();
  }
};

struct KjtA2aState : KjtA2aLists {
  KjtA2aState(Group g, std::vector<int64_t> key_splits, int64_t key_stagger, KJTAllToAllOptions o,
              KeyedJaggedTensor kjt)
      : KjtA2aLists(ferry::detail::ThreadSpares<KjtA2aLists>::take()),
        group(std::move(g)),
        splits(std::move(key_splits)),
        stagger(key_stagger),
        options(o),
        input(std::move(kjt)),
        W(group.size()),
        me(group.rank()) {}
  ~KjtA2aState() {
    KjtA2aLists& lists = *this;
    lists.clear();
    ferry::detail::ThreadSpares<KjtA2aLists>::give(std::move(lists));
  }
  KjtA2aState(const KjtA2aState&) = delete;
  KjtA2aState& operator=(const KjtA2aState&) = delete;

  Group group;
  std::vector<int64_t> splits;
  int64_t stagger = 1;
  KJTAllToAllOptions options;
  KeyedJaggedTensor input;
  int W = 1, me = 0;

  // sender side (the lists are KjtA2aLists')
  std::string local_error;  // why this rank's input was rejected
  std::exception_ptr local_exception;

  // phase 1
  Tensor record_out;
  Work phase1;
  bool phase1_done = false;
  std::exception_ptr phase1_error;

  // settled by phase 1
  std::optional<std::vector<int64_t>> recat;

  // phase 2
  std::optional<KeyedJaggedTensor> result;
  std::exception_ptr phase2_error;

  int64_t keys_total() const { return detail::sum_of(splits); }

  int64_t flags() const {
    int64_t f = 0;
    if (input.variable_stride_per_key()) f |= 1;
    if (input.has_weights()) f |= 2;
    f |= static_cast<int64_t>(input.lengths().dtype()) << 8;
    if (input.has_weights()) f |= static_cast<int64_t>(input.weights().dtype()) << 16;
    return f;
  }

  // The checks every rank runs on the gathered records; they see the same records, so they throw
  // the same error everywhere.
  void check_records(const std::vector<const int64_t*>& rec) const {
    check_record_kinds(rec);
    check_statuses(rec);
    check_agreement(rec);
    check_label_counts(rec);
    check_per_key_counts(rec);
  }

  // Every record is a KJTAllToAll's: a different collective on the group would show here.
  void check_record_kinds(const std::vector<const int64_t*>& rec) const {
    for (int s = 0; s < W; ++s)
      FERRY_CHECK(rec[s][kMagicWord] == kMagic, MismatchError, detail::where(kWhere, group),
                  ": rank ", s,
                  " sent a phase-1 record that is not a KJTAllToAll's (a different collective "
                  "on this group?)");
  }

  // A rank whose input was rejected locally fails the call everywhere: its own message there,
  // the reason it gave on every other rank.
  void check_statuses(const std::vector<const int64_t*>& rec) const {
    for (int s = 0; s < W; ++s) {
      if (rec[s][kStatus] == kOk) continue;
      if (s == me) {
        FERRY_THROW(InvalidArgument, local_error,
                    " (every rank of the group fails this KJTAllToAll; no data moved)");
      }
      FERRY_THROW(InvalidArgument, detail::where(kWhere, group), ": rank ", s,
                  " rejected its input: ", status_text(rec[s][kStatus]),
                  "; every rank fails this call and no data moved");
    }
  }

  // Every rank gave the same keys, splits, layout and limit as rank 0.
  void check_agreement(const std::vector<const int64_t*>& rec) const {
    // `here` describes this rank's side; it is formatted only for an error (formatting it on
    // every call cost more than the rest of phase 1's bookkeeping).
    auto mismatch = [&](Word w, const char* what, const auto& here) {
      std::vector<int64_t> bad;
      for (int s = 1; s < W; ++s)
        if (rec[s][w] != rec[0][w]) bad.push_back(s);
      if (bad.empty()) return;
      FERRY_THROW(MismatchError, detail::where(kWhere, group), ": ranks ", list_str(bad),
                  " disagree with rank 0 about ", what, " (here: ", here(),
                  "); every rank fails this call and no data moved");
    };
    mismatch(kKeysFp, "the keys or their order", [&] { return detail::keys_str(input.keys()); });
    mismatch(kSplitsFp, "the key splits or the stagger", [&] {
      return "splits " + list_str(splits) + ", stagger " + std::to_string(stagger);
    });
    mismatch(kFlags, "the KJT's layout (variable stride per key, weights, dtypes)", [&] {
      return std::string("variable stride per key ") +
             (input.variable_stride_per_key() ? "yes" : "no") + ", weights " +
             (input.has_weights() ? dtype_name(input.weights().dtype()) : "none") +
             ", lengths " + dtype_name(input.lengths().dtype());
    });
    mismatch(kLimit, "max_recv_elements",
             [&] { return std::to_string(options.max_recv_elements); });
  }

  // Counts per label: consistent with the splits, and within bounds at every receiver.
  void check_label_counts(const std::vector<const int64_t*>& rec) const {
    const bool vbe = input.variable_stride_per_key();
    int64_t slots[kSlots];
    const size_t num_labels = labels.size();
    for (size_t l = 0; l < num_labels; ++l) slots[l] = slot_of(labels[l]);
    for (int j = 0; j < W; ++j) {
      for (size_t l = 0; l < num_labels; ++l) {
        const int64_t slot = slots[l];
        int64_t total = 0;
        for (int s = 0; s < W; ++s) {
          const int64_t c = rec[s][kHeader + slot * W + j];
          FERRY_CHECK(c >= 0, InvalidArgument, detail::where(kWhere, group), ": rank ", s,
                      " would send a negative ", kSlotLabel[slot], " count ", c, " to rank ", j);
          if (slot == kLengths && !vbe)
            FERRY_CHECK(c == rec[s][kStride] * splits[j], MismatchError,
                        detail::where(kWhere, group), ": rank ", s, " would send ", c,
                        " lengths to rank ", j, ", not its stride ", rec[s][kStride], " x ",
                        splits[j], " keys");
          if (slot == kStrides)
            FERRY_CHECK(c == splits[j], MismatchError, detail::where(kWhere, group), ": rank ", s,
                        " would send ", c, " strides to rank ", j, ", not ", splits[j]);
          FERRY_CHECK(!__builtin_add_overflow(total, c, &total), InvalidArgument,
                      detail::where(kWhere, group), ": the ", kSlotLabel[slot], " counts rank ",
                      j, " would receive overflow int64");
        }
        if (slot == kWeights)
          for (int s = 0; s < W; ++s)
            FERRY_CHECK(rec[s][kHeader + kWeights * W + j] == rec[s][kHeader + kValues * W + j],
                        MismatchError, detail::where(kWhere, group), ": rank ", s,
                        " would send a different number of weights and values to rank ", j);
        FERRY_CHECK(total <= options.max_recv_elements, InvalidArgument,
                    detail::where(kWhere, group), ": rank ", j, " would receive ", total, " ",
                    kSlotLabel[slot], " elements, more than max_recv_elements ",
                    options.max_recv_elements, "; every rank fails this call and no data moved");
      }
    }
  }

  // Per-key value counts: non-negative, and summing to the values each destination gets (the
  // receivers place the values by them).
  void check_per_key_counts(const std::vector<const int64_t*>& rec) const {
    for (int s = 0; s < W; ++s) {
      const int64_t* per_key = rec[s] + kHeader + kSlots * W;
      int64_t k = 0;
      for (int j = 0; j < W; ++j) {
        int64_t sum = 0;
        for (int64_t e = k + splits[j]; k < e; ++k) {
          FERRY_CHECK(per_key[k] >= 0 && !__builtin_add_overflow(sum, per_key[k], &sum),
                      InvalidArgument, detail::where(kWhere, group), ": rank ", s,
                      " sent a bad value count ", per_key[k], " for key ", k);
        }
        FERRY_CHECK(sum == rec[s][kHeader + kValues * W + j], MismatchError,
                    detail::where(kWhere, group), ": rank ", s,
                    "'s per-key value counts for rank ", j, " sum to ", sum, ", not the ",
                    rec[s][kHeader + kValues * W + j], " values it sends there");
      }
    }
  }

  void settle(const std::vector<const int64_t*>& rec) {
    output_splits.resize(labels.size());
    for (size_t l = 0; l < labels.size(); ++l) {
      const int64_t slot = slot_of(labels[l]);
      output_splits[l].resize(static_cast<size_t>(W));
      for (int s = 0; s < W; ++s) output_splits[l][s] = rec[s][kHeader + slot * W + me];
    }
    if (!input.variable_stride_per_key())
      for (int s = 0; s < W; ++s) stride_per_rank.push_back(rec[s][kStride]);
    recat = get_recat(splits[me], W, stagger);
    int64_t k0 = 0;
    for (int j = 0; j < me; ++j) k0 += splits[j];
    seg_values.reserve(static_cast<size_t>(W * splits[me]));
    for (int s = 0; s < W; ++s)
      for (int64_t t = 0; t < splits[me]; ++t)
        seg_values.push_back(rec[s][kHeader + kSlots * W + k0 + t]);
  }

  // Phase 2. With a uniform stride per key (the common case) every (source s, local key t)
  // segment's place in the result is known once phase 1 is settled: its lengths are source s's
  // stride, its values seg_values[s K + t], and the segments follow in recat order. So the labels
  // move in ONE all_to_all_single (a part per label) whose receive layouts put every segment at
  // its recat position in the result: nothing is staged and nothing is reassembled (the local
  // transport copies each byte once; MPI and UCX unpack their receive once). With a variable
  // stride per key the received buffers go through kjt_dist_init.
  void issue_phase2() {
    const bool uniform = !input.variable_stride_per_key();
    const int64_t K = splits[me];
    seg_vpos.assign(static_cast<size_t>(W * K), 0);
    seg_lpos.assign(static_cast<size_t>(W * K), 0);
    int64_t lp = 0, vp = 0;
    if (uniform && recat)
      for (int64_t seg : *recat) {
        seg_lpos[seg] = lp;
        seg_vpos[seg] = vp;
        lp += stride_per_rank[seg / K];
        vp += seg_values[seg];
      }
    // Uniform stride: every label in one collective. Its parts' layout lists are the ones this
    // thread's previous call left, emptied but with their capacity: a training step builds them
    // without allocating (the collective reads them during the call only).
    std::vector<LayoutAllToAllPart> parts =
        uniform ? ferry::detail::ThreadSpares<std::vector<LayoutAllToAllPart>>::take()
                : std::vector<LayoutAllToAllPart>();
    parts.resize(uniform ? labels.size() : 0);
    for (size_t l = 0; l < labels.size(); ++l) {
      // In shared memory on one host (above a slot): the peers write their segments into it.
      out.push_back(ferry::detail::shm::empty_for_peers({detail::sum_of(output_splits[l])},
                                                        send[l].dtype(), group.impl(),
                                                        "the KJT all-to-all's output"));
      if (!uniform) {
        phase2.push_back(all_to_all_single(send[l], out.back(), output_splits[l],
                                           input_splits[l], group));
        if (options.progress_in_background) phase2.back().progress_in_background();
        continue;
      }
      LayoutAllToAllPart& part = parts[l];
      part.input = send[l];
      part.output = out.back();
      part.send_layouts.resize(static_cast<size_t>(W));
      part.recv_layouts.resize(static_cast<size_t>(W));
      int64_t off = 0;
      for (int j = 0; j < W; ++j) {
        part.send_layouts[j].assign(1, StridedRun{off, 1, input_splits[l][j], 0});
        off += input_splits[l][j];
      }
      for (int s = 0; s < W; ++s) {
        BlockLayout& from_s = part.recv_layouts[s];
        from_s.clear();
        for (int64_t t = 0; t < K; ++t) {
          const size_t seg = static_cast<size_t>(s * K + t);
          from_s.push_back(l == 0 ? StridedRun{seg_lpos[seg], 1, stride_per_rank[s], 0}
                                  : StridedRun{seg_vpos[seg], 1, seg_values[seg], 0});
        }
      }
    }
    if (uniform) {
      phase2.push_back(all_to_all_single(parts, group));
      if (options.progress_in_background) phase2.back().progress_in_background();
      for (LayoutAllToAllPart& part : parts) part.input = part.output = Tensor();
      ferry::detail::ThreadSpares<std::vector<LayoutAllToAllPart>>::give(std::move(parts));
    }
  }

  // The uniform-stride result: every segment's lengths must sum to the values placed for it (a
  // sender whose lengths disagreed with its per-key counts would otherwise shift ids silently).
  // That check covers the constructor's, so the KJT is built without another pass over the
  // lengths, its length_per_key known from the segments.
  KeyedJaggedTensor placed_result() {
    const int64_t K = splits[me];
    const int64_t stride = detail::sum_of(stride_per_rank);
    std::vector<int64_t> length_per_key(static_cast<size_t>(K), 0);
    for (int s = 0; s < W; ++s)
      for (int64_t t = 0; t < K; ++t) {
        const size_t seg = static_cast<size_t>(s * K + t);
        const detail::LengthsSum got =
            detail::sum_lengths(out[0], seg_lpos[seg], seg_lpos[seg] + stride_per_rank[s]);
        FERRY_CHECK(!got.negative && got.sum == seg_values[seg], InvalidArgument,
                    detail::where(kWhere, group), ": rank ", s, "'s lengths for key ",
                    keys_out[t], " sum to ",
                    got.sum, got.negative ? " with a negative length" : "",
                    ", but its per-key count was ", seg_values[seg]);
        length_per_key[static_cast<size_t>(t)] += seg_values[seg];
      }
    KjtInit init{.keys = keys_out, .values = out[1], .lengths = out[0], .stride = stride};
    if (labels.size() > 2) init.weights = out[2];
    return detail::kjt_with_checked_lengths(std::move(init), std::move(length_per_key), kWhere);
  }

  KeyedJaggedTensor finish() {
    if (result) return *result;
    if (phase2_error) std::rethrow_exception(phase2_error);
    try {
      if (W == 1) {
        result = input;
      } else {
        for (Work& w : phase2) w.wait();
        result = input.variable_stride_per_key()
                     ? kjt_dist_init(keys_out, out, true, W, recat, stride_per_rank)
                     : placed_result();
      }
    } catch (...) {
      phase2_error = std::current_exception();
      throw;
    }
    // The buffers belong to the result now; the sent tensors are no longer needed.
    send.clear();
    out.clear();
    return *result;
  }
};

}  // namespace detail

// ---- KJTAllToAllTensorsAwaitable ----

KJTAllToAllTensorsAwaitable::KJTAllToAllTensorsAwaitable(std::shared_ptr<detail::KjtA2aState> state)
    : Awaitable<KeyedJaggedTensor>([state] { return state->finish(); }), state_(std::move(state)) {}

const std::vector<std::string>& KJTAllToAllTensorsAwaitable::labels() const { return state_->labels; }
const std::vector<std::vector<int64_t>>& KJTAllToAllTensorsAwaitable::input_splits() const {
  return state_->input_splits;
}
const std::vector<std::vector<int64_t>>& KJTAllToAllTensorsAwaitable::output_splits() const {
  return state_->output_splits;
}
namespace {
size_t label_index(const std::vector<std::string>& labels, const std::string& label) {
  for (size_t i = 0; i < labels.size(); ++i)
    if (labels[i] == label) return i;
  FERRY_THROW(InvalidArgument, kWhere, ": no label \"", label, "\" in this exchange (labels: ",
              detail::keys_str(labels), ")");
}
}  // namespace
const std::vector<int64_t>& KJTAllToAllTensorsAwaitable::input_splits(const std::string& label) const {
  return state_->input_splits[label_index(state_->labels, label)];
}
const std::vector<int64_t>& KJTAllToAllTensorsAwaitable::output_splits(const std::string& label) const {
  return state_->output_splits[label_index(state_->labels, label)];
}
const std::vector<int64_t>& KJTAllToAllTensorsAwaitable::stride_per_rank() const {
  return state_->stride_per_rank;
}
const std::vector<std::string>& KJTAllToAllTensorsAwaitable::keys() const { return state_->keys_out; }
const std::optional<std::vector<int64_t>>& KJTAllToAllTensorsAwaitable::recat() const {
  return state_->recat;
}
const std::vector<int64_t>& KJTAllToAllTensorsAwaitable::splits() const { return state_->splits; }
int64_t KJTAllToAllTensorsAwaitable::stagger() const { return state_->stagger; }

// ---- KJTAllToAllSplitsAwaitable ----

namespace {

// Settles phase 1 and issues phase 2 (once; a later call rethrows the first error).
void phase1_wait(const std::shared_ptr<detail::KjtA2aState>& st) {
  if (st->phase1_done) return;
  if (st->phase1_error) std::rethrow_exception(st->phase1_error);
  try {
    if (st->W == 1) {
      if (st->local_exception) std::rethrow_exception(st->local_exception);
      st->output_splits = st->input_splits;
      if (!st->input.variable_stride_per_key()) st->stride_per_rank = {st->input.stride()};
    } else {
      st->phase1.wait();
      const int64_t words = record_words(st->W, st->keys_total());
      const int64_t* all = st->record_out.data<int64_t>();
      std::vector<const int64_t*>& rec = st->records;
      rec.clear();
      for (int s = 0; s < st->W; ++s) rec.push_back(all + s * words);
      st->check_records(rec);
      st->settle(rec);
      st->issue_phase2();
    }
  } catch (...) {
    st->phase1_error = std::current_exception();
    throw;
  }
  st->phase1_done = true;
}

}  // namespace

// The phase-2 awaitable lives in the phase-1 awaitable's closure, not in the state: the state
// holding an awaitable that holds the state would be a reference cycle, and every call's
// buffers (the received KJT among them) would leak.
KJTAllToAllSplitsAwaitable::KJTAllToAllSplitsAwaitable(std::shared_ptr<detail::KjtA2aState> state)
    : Awaitable<KJTAllToAllTensorsAwaitable>(
          [state, phase2 = ferry::detail::make_pooled<std::optional<KJTAllToAllTensorsAwaitable>>()] {
            if (!*phase2) {
              phase1_wait(state);
              phase2->emplace(state);
            }
            return **phase2;
          }) {}

// ---- KJTAllToAll ----

KJTAllToAll::KJTAllToAll(Group group, std::vector<int64_t> splits, int64_t stagger,
                         KJTAllToAllOptions options)
    : group_(std::move(group)), splits_(std::move(splits)), stagger_(stagger), options_(options) {
  detail::check_group(group_, kWhere);
  const int W = group_.size();
  FERRY_CHECK(static_cast<int>(splits_.size()) == W, InvalidArgument, kWhere, ": splits ",
              list_str(splits_), " has ", splits_.size(), " entries for a group of ", W, " ranks");
  for (int64_t s : splits_)
    FERRY_CHECK(s >= 0, InvalidArgument, kWhere, ": splits ", list_str(splits_),
                " contain a negative count");
  FERRY_CHECK(stagger_ >= 1 && W % stagger_ == 0, InvalidArgument, kWhere, ": stagger ", stagger_,
              " must be >= 1 and divide the group size ", W);
  FERRY_CHECK(options_.max_recv_elements >= 0, InvalidArgument, kWhere,
              ": max_recv_elements must be >= 0");
}

KJTAllToAllSplitsAwaitable KJTAllToAll::forward(const KeyedJaggedTensor& input) const {
  using namespace detail;
  auto st = ferry::detail::make_pooled<KjtA2aState>(group_, splits_, stagger_, options_, input);
  const int W = st->W;

  kjt_dist_labels_into(input, st->labels);
  int64_t status = kOk;
  try {
    kjt_dist_splits_into(input, splits_, st->input_splits);
    kjt_dist_tensors_into(input, st->send);
    int64_t k0 = 0;
    for (int j = 0; j < st->me; ++j) k0 += splits_[j];
    st->keys_out.assign(input.keys().begin() + k0, input.keys().begin() + k0 + splits_[st->me]);
  } catch (const std::exception& e) {
    status = sum_of(splits_) != input.num_keys() ? kKeySplits : kBadInput;
    std::string what = e.what();
    if (what.rfind("ferry: ", 0) == 0) what.erase(0, 7);
    st->local_error = detail::where(kWhere, group_) + ": " + what;
    st->local_exception = std::current_exception();
    st->input_splits.assign(st->labels.size(), std::vector<int64_t>(W, 0));
  }
  if (W == 1) return KJTAllToAllSplitsAwaitable(st);

  // The phase-1 record: what an all_to_all would carry to each destination (its counts and my
  // stride) plus, for the checks, every other destination's counts and the fingerprints.
  const int64_t words = record_words(W, st->keys_total());
  Tensor record = zeros({words}, DType::Int64);
  int64_t* rec = record.data<int64_t>();
  Fnv keys_fp, splits_fp;
  for (const std::string& k : input.keys()) keys_fp.str(k);
  keys_fp.i64(input.num_keys());
  for (int64_t s : splits_) splits_fp.i64(s);
  splits_fp.i64(-1);
  splits_fp.i64(stagger_);
  rec[kMagicWord] = kMagic;
  rec[kStatus] = status;
  rec[kKeysFp] = keys_fp.value();
  rec[kSplitsFp] = splits_fp.value();
  rec[kFlags] = st->flags();
  rec[kStride] = input.variable_stride_per_key() ? -1 : input.stride();
  rec[kLimit] = options_.max_recv_elements;
  for (size_t l = 0; l < st->labels.size(); ++l) {
    const int64_t slot = slot_of(st->labels[l]);
    for (int j = 0; j < W; ++j) rec[kHeader + slot * W + j] = st->input_splits[l][j];
  }
  if (status == kOk) {
    const std::vector<int64_t>& per_key = input.length_per_key();
    std::copy(per_key.begin(), per_key.end(), rec + kHeader + kSlots * W);
  }
  st->record_out = empty({W * words}, DType::Int64);
  st->phase1 = all_gather(record, st->record_out, group_);
  if (options_.progress_in_background) st->phase1.progress_in_background();
  return KJTAllToAllSplitsAwaitable(st);
}

}  // namespace ferry::torchrec
