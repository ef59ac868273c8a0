#include <ferry/collectives/engine/fingerprint.h>

#include <ferry/collectives/engine/op_context.h>
#include <ferry/runtime/error.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <memory>

namespace ferry::detail {

Fingerprint Fingerprint::of(const char* op, uint64_t seq, uint32_t group, const OpSummary& what) {
  Fingerprint f;
  f.group = group;
  f.seq = seq;
  std::strncpy(f.op, op, sizeof(f.op) - 1);
  f.agreed = what.agreed;
  f.per_row = what.per_row;
  f.splits = what.splits;
  for (int d = 0; d < OpSummary::kDims; ++d) f.dims[d] = what.dims[static_cast<size_t>(d)];
  f.ndim = what.ndim;
  f.root = what.root;
  f.has_tensor = what.has_tensor;
  f.lists = what.lists;
  f.dtype = static_cast<uint8_t>(what.dtype);
  f.has_reduce_op = what.has_reduce_op;
  f.reduce_op = static_cast<uint8_t>(what.reduce_op);
  return f;
}

bool Fingerprint::well_formed() const {
  // Enough dims for any tensor ferry can make; the summary shows kDims of them.
  constexpr int32_t kMaxDims = 64;
  return magic == kMagic && strnlen(op, sizeof(op)) < sizeof(op) && ndim >= 0 &&
         ndim <= kMaxDims && dtype < std::size(kAllDTypes) &&
         reduce_op <= static_cast<uint8_t>(ReduceOp::Max);
}

std::string Fingerprint::describe() const {
  if (!well_formed())
    return str("a malformed collective fingerprint (another build of ferry?) (seq ", seq, ")");
  OpSummary s;
  s.has_tensor = has_tensor != 0;
  s.lists = lists != 0;
  s.dtype = static_cast<DType>(dtype);
  for (int d = 0; d < OpSummary::kDims; ++d) s.dims[static_cast<size_t>(d)] = dims[d];
  s.ndim = ndim;
  s.has_reduce_op = has_reduce_op != 0;
  s.reduce_op = static_cast<ReduceOp>(reduce_op);
  s.root = root;
  const std::string summary = s.format();
  std::string name(op, strnlen(op, sizeof(op)));
  if (!summary.empty()) name.append(" ").append(summary);
  if (splits != 0) name += " with split sizes #" + std::to_string(splits % 100000);
  return str(name, " (seq ", seq, ")");
}

// "all_reduce of 4096 float32 (sum)", "broadcast of 64 bytes from root 1", "all_gather of 16
// bytes per rank", "reduce_scatter of 2 float32 (sum) per rank": a call as the MPI transport's
// key check names it, so a mismatch reads alike whichever path found it (MPI moves the
// data-movement ops' blocks as bytes, and counts an equal reduce_scatter's block). `ranks`: the
// group's size.
std::string short_call(const Fingerprint& f, int ranks) {
  const std::string op(f.op, strnlen(f.op, sizeof f.op));
  std::string s = op;
  const bool movement = f.has_reduce_op == 0 && (op == "broadcast" || op == "all_gather");
  int64_t count = f.agreed;
  bool per_rank = op == "all_gather" && count >= 0;
  if (op == "reduce_scatter" && count >= 0 && f.ndim >= 1 && ranks > 0 &&
      f.dims[0] % ranks == 0) {
    OpSummary equal;
    equal.with_equal_splits(ranks, f.dims[0] / ranks);
    if (equal.splits == f.splits) {
      count /= ranks;
      per_rank = true;
    }
  }
  if (f.has_tensor != 0 || f.lists != 0) {
    if (movement && count >= 0)
      s += str(" of ", count * static_cast<int64_t>(dtype_size(static_cast<DType>(f.dtype))),
               " bytes");
    else
      s += (count >= 0 ? str(" of ", count, " ") : std::string(" of ")) +
           dtype_name(static_cast<DType>(f.dtype));
  }
  if (f.has_reduce_op != 0) s += str(" (", reduce_op_name(static_cast<ReduceOp>(f.reduce_op)), ")");
  if (per_rank) s += " per rank";
  if (f.root >= 0)
    s += str(op == "broadcast" || op == "scatter" ? " from root "
             : op == "reduce" || op == "gather"   ? " to root "
                                                  : " root ",
             f.root);
  return s;
}

namespace {

// What the ranks must agree on, as opposed to how each rank called it: all_to_all (lists) and
// all_to_all_single move the same messages pair by pair, and callers mix them on purpose (the
// KJT all-to-all takes the list form on ranks that must leave out their own block), so both
// are one collective whose per-peer sizes only the transports check.
Fingerprint canonical(const Fingerprint& f) {
  Fingerprint c = f;
  if (std::strncmp(f.op, "all_to_all", sizeof(f.op)) == 0 ||
      std::strncmp(f.op, "all_to_all_single", sizeof(f.op)) == 0) {
    std::memset(c.op, 0, sizeof(c.op));
    std::strncpy(c.op, "all_to_all", sizeof(c.op) - 1);
    c.agreed = -1;
    c.per_row = 0;
    c.splits = 0;
  }
  return c;
}

const char* difference(const Fingerprint& a, const Fingerprint& b);

}  // namespace

const char* fingerprint_difference(const Fingerprint& a, const Fingerprint& b) {
  if (!a.well_formed() || !b.well_formed()) return "the fingerprint's form";
  return difference(canonical(a), canonical(b));
}

namespace {

const char* difference(const Fingerprint& a, const Fingerprint& b) {
  if (std::strncmp(a.op, b.op, sizeof(a.op)) != 0) return "the collective";
  if (a.group != b.group) return "the group";
  if (a.seq != b.seq) return "the sequence number";
  if (!a.complete || !b.complete) return nullptr;
  if ((a.has_tensor || a.lists) && (b.has_tensor || b.lists) && a.dtype != b.dtype)
    return "the dtype";
  if (a.has_reduce_op != b.has_reduce_op || a.reduce_op != b.reduce_op) return "the reduce op";
  if (a.root != b.root) return "the root";
  if (a.per_row != b.per_row || (a.agreed >= 0 && b.agreed >= 0 && a.agreed != b.agreed))
    return a.per_row ? "the elements per row" : "the element count";
  if (a.splits != b.splits) return "the split sizes";
  return nullptr;
}

}  // namespace

namespace {

// Tells apart the dtypes of one width (float32 / int32, float16 / bfloat16, float64 / int64)
// and no more: a call with another element count or width moves another number of bytes, which
// every transport already reports at once as a MismatchError when the tags match, whereas
// differing tags would only be diagnosed at the deadline.
uint8_t dtype_within_width(DType t) {
  switch (t) {
    case DType::BFloat16:
    case DType::Int32:
    case DType::Int64:
      return 1;
    default:
      return 0;
  }
}

}  // namespace

uint32_t check_hash(const Fingerprint& f) {
  // FNV-1a over the op, the reduce op, the root and the dtype within its width (see above); the
  // tag carries the group and the sequence number. Not the element count or the split sizes:
  // ranks that disagree on those move other byte counts, which fail at once where the tags
  // match (a torchrec caller relies on that), but would only be diagnosed at the deadline.
  // The fields of canonical(f) that the hash reads, without copying the whole fingerprint (it
  // runs for every op): both all-to-all forms hash as "all_to_all", without rows.
  static constexpr char kAllToAll[] = "all_to_all";
  constexpr size_t kAllToAllLength = sizeof(kAllToAll) - 1;
  const size_t length = strnlen(f.op, sizeof(f.op));
  const bool all_to_all =
      length >= kAllToAllLength && std::memcmp(f.op, kAllToAll, kAllToAllLength) == 0 &&
      (length == kAllToAllLength || std::strncmp(f.op, "all_to_all_single", sizeof(f.op)) == 0);
  uint32_t h = 2166136261u;
  auto mix = [&h](const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 16777619u;
  };
  if (all_to_all)
    mix(kAllToAll, kAllToAllLength);
  else
    mix(f.op, length);
  const uint8_t small[] = {dtype_within_width(static_cast<DType>(f.dtype)), f.has_reduce_op,
                           f.reduce_op, static_cast<uint8_t>(all_to_all ? 0 : f.per_row)};
  mix(small, sizeof(small));
  mix(&f.root, sizeof(f.root));
  return h == 0 ? 1 : h;
}

std::string mismatch_message(const OpContext& ctx, const Fingerprint& mine,
                             const std::vector<std::pair<int, Fingerprint>>& theirs) {
  std::string msg = str(mine.op, " (seq ", mine.seq, ") on rank ", ctx.rank(), ": the ranks ",
                        "called different collectives: rank ", ctx.rank(), " called ",
                        mine.describe());
  for (const auto& [peer, f] : theirs) {
    const char* what = fingerprint_difference(mine, f);
    msg += str(", rank ", peer, " called ", f.describe(), " (", what ? what : "nothing",
               " differs)");
  }
  return msg;
}

void exchange_fingerprints(OpContext& ctx, const Fingerprint& mine) {
  const int n = ctx.size(), me = ctx.rank();
  if (n == 1) return;
  // Every rank's fingerprint, this rank's sent from its own slot: the op holds the list
  // (OpContext::hold), since a send or receive that cannot be withdrawn after a failure may be
  // read or written after this function and the op's Work are gone.
  const std::shared_ptr<Fingerprint[]> all = std::make_shared<Fingerprint[]>(static_cast<size_t>(n));
  ctx.hold(std::shared_ptr<const void>(all));
  Fingerprint* theirs = all.get();
  theirs[me] = mine;
  for (int k = 0; k < n; ++k)
    if (k != me) ctx.recv(k, OpContext::kFingerprintStep, &theirs[k], sizeof(Fingerprint));
  for (int k = 0; k < n; ++k)
    if (k != me) ctx.send(k, OpContext::kFingerprintStep, &theirs[me], sizeof(Fingerprint));
  ctx.wait_all();
  std::vector<std::pair<int, Fingerprint>> differ;
  for (int k = 0; k < n; ++k) {
    if (k == me) continue;
    const Fingerprint& f = theirs[k];
    FERRY_CHECK(f.magic == Fingerprint::kMagic, MismatchError, mine.op, " (seq ", mine.seq,
                ") on rank ", me, ": rank ", k, " sent no collective fingerprint (FERRY_CHECK ",
                "must be set alike on every rank)");
    FERRY_CHECK(f.well_formed(), MismatchError, mine.op, " (seq ", mine.seq, ") on rank ", me,
                ": rank ", k, " sent a malformed collective fingerprint (every rank must run ",
                "the same build of ferry)");
    if (fingerprint_difference(mine, f) != nullptr) differ.emplace_back(k, f);
  }
  if (!differ.empty())
    FERRY_THROW(MismatchError, mismatch_message(ctx, mine, differ),
                " (FERRY_CHECK=1 compared the calls before any data moved)");
}

}  // namespace ferry::detail
