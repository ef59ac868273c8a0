#include <ferry/collectives/torchrec/modules/embedding_lookup.h>

#include <ferry/collectives/torchrec/modules/row_accumulator.h>
#include <ferry/collectives/torchrec/modules/row_kernels.h>

#include <ferry/autograd/function.h>
#include <ferry/autograd/ops_detail.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/intra_op.h>
#include <ferry/runtime/object_pool.h>

#include <Eigen/Core>

#include <algorithm>
#include <iostream>
#include <cstdint>
#include <numeric>
#include <span>

namespace ferry::torchrec {

namespace {

// The int64 or int32 tensor t's values into out (its capacity reused).
void assign_i64(std::vector<int64_t>& out, const Tensor& t) {
  if (t.dtype() == DType::Int64) {
    const int64_t* p = t.data<int64_t>();
    out.assign(p, p + t.numel());
  } else {
    const int32_t* p = t.data<int32_t>();
    out.assign(p, p + t.numel());
  }
}

// What one lookup call resolved at forward and its backward needs again. Moved, never copied:
// the items' rows point into the plan's own row_storage.
struct Plan {
  Plan() = default;
  Plan(Plan&&) = default;
  Plan& operator=(Plan&&) = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  const char* op = "";
  int64_t B = 0;
  std::vector<int64_t> offsets;  // the KJT's offsets (lengths.numel() + 1)
  std::vector<std::shared_ptr<EmbeddingTable>> tables;  // distinct, first-use order
  std::vector<uint64_t> table_versions;                 // weight versions at forward
  struct Item {
    size_t table = 0;        // index into tables
    int64_t key = 0;         // KJT key index
    int64_t first_bag = 0;   // where the key's lengths start
    int64_t col_start = 0;   // pooled: output column of the block
    PoolingType pooling = PoolingType::Sum;
    std::string feature;
    std::span<const int64_t> rows;  // per id of the key: local row, or -1 outside the block
  };
  std::vector<Item> items;
  std::vector<int64_t> row_storage;  // every item's rows, one after another (one allocation)
  int64_t total_cols = 0;
  DType dtype = DType::Float32;
  std::vector<int64_t> divisors;  // MEAN divisors per bag (empty: bag lengths)

  // Empties the plan for its next call, keeping its lists' capacity (ThreadSpares).
  void clear() {
    op = "";
    B = 0;
    offsets.clear();
    tables.clear();
    table_versions.clear();
    items.clear();
    row_storage.clear();
    total_cols = 0;
    dtype = DType::Float32;
    divisors.clear();
  }

  int64_t bag_begin(const Item& it, int64_t b) const { return offsets[it.first_bag + b]; }
  int64_t bag_end(const Item& it, int64_t b) const { return offsets[it.first_bag + b + 1]; }
  int64_t divisor(const Item& it, int64_t b) const {
    return divisors.empty() ? bag_end(it, b) - bag_begin(it, b) : divisors[it.first_bag + b];
  }
};

// The ids lo..hi of `it`'s bags as local rows of `t` (-1: a row of another shard), each checked
// against the whole table as the table's bounds-check mode says.
void resolve_rows(const Plan& p, const Plan::Item& it, const EmbeddingTable& t, const int64_t* ids,
                  int64_t lo, int64_t hi, int64_t* rows) {
  const char* op = p.op;
  const int64_t R = t.total_rows(), r0 = t.shard().row_offset, nr = t.shard().num_rows;
  // Nearly always every id is in range: that is checked first over all of them (one OR of
  // each id and R - 1 - id, whose top bit is set only for an id out of range, in unsigned
  // arithmetic that wraps), and the local rows are then computed without a branch per id; both
  // loops run in whole registers. Otherwise the loop below finds the bad ids one by one.
  const auto last = static_cast<uint64_t>(R - 1);
  uint64_t signs = 0;
  for (int64_t i = lo; i < hi; ++i) {
    const auto id = static_cast<uint64_t>(ids[i]);
    signs |= id | (last - id);
  }
  if (signs >> 63 == 0) {
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t local = ids[i] - r0;
      rows[i - lo] = static_cast<uint64_t>(local) < static_cast<uint64_t>(nr) ? local : -1;
    }
    return;
  }
  bool warned = false;
  for (int64_t i = lo; i < hi; ++i) {
    int64_t id = ids[i];
    if (id < 0 || id >= R) [[unlikely]] {
      switch (t.bounds_check_mode()) {
        case BoundsCheckMode::Fatal: {
          const int64_t bag =
              std::upper_bound(p.offsets.begin() + it.first_bag,
                               p.offsets.begin() + it.first_bag + p.B + 1, i) -
              (p.offsets.begin() + it.first_bag) - 1;
          FERRY_THROW(InvalidArgument, op, ": id ", id, " of feature \"", it.feature,
                      "\" (sample ", bag, ") is out of range for table \"", t.name(),
                      "\" of ", R, " rows (ids must be in [0, ", R, "))");
        }
        case BoundsCheckMode::Warning:
          if (!warned) {
            std::cerr << "ferry: " << op << ": warning: id " << id << " of feature \""
                      << it.feature << "\" is out of range for table \"" << t.name()
                      << "\" of " << R << " rows; using row 0 (BoundsCheckMode::Warning)\n";
            warned = true;
          }
          id = 0;
          break;
        case BoundsCheckMode::Clip: id = id < 0 ? 0 : R - 1; break;
      }
    }
    const int64_t local = id - r0;
    rows[i - lo] = local >= 0 && local < nr ? local : -1;
  }
}

Plan make_plan(const char* op, const std::vector<FeatureLookup>& lookups,
               const KeyedJaggedTensor& kjt, const Tensor& mean_divisors) {
  // A plan made by an earlier call on this thread and dropped with its backward: its lists
  // keep their capacity, so a training step's plan allocates nothing.
  Plan p = ferry::detail::ThreadSpares<Plan>::take();
  p.op = op;
  FERRY_CHECK(!kjt.variable_stride_per_key(), InvalidArgument, op,
              ": a KJT with a variable stride per key (VBE) is not supported");
  p.B = kjt.stride();
  assign_i64(p.offsets, kjt.offsets());
  const auto& first_bag = kjt.lengths_offset_per_key();
  const int64_t* ids = kjt.values().data<int64_t>();
  p.items.reserve(lookups.size());
  p.tables.reserve(lookups.size());
  p.table_versions.reserve(lookups.size());
  p.row_storage.reserve(static_cast<size_t>(kjt.values().numel()));  // enough unless keys repeat
  // Each item's first row in row_storage: scratch of this thread's, emptied by every call.
  thread_local std::vector<size_t> rows_at;
  rows_at.clear();
  rows_at.reserve(lookups.size());
  for (const FeatureLookup& l : lookups) {
    FERRY_CHECK(l.table != nullptr, InvalidArgument, op, ": feature \"", l.feature,
                "\" has no table");
    Plan::Item it;
    it.key = l.key_index >= 0 ? l.key_index : kjt.key_index(l.feature);
    FERRY_CHECK(it.key < kjt.num_keys(), InvalidArgument, op, ": key index ", it.key,
                " but the KJT has ", kjt.num_keys(), " keys");
    it.feature = l.feature.empty() ? kjt.keys()[static_cast<size_t>(it.key)] : l.feature;
    // The tables' slots, by first use: a linear search (a collection has tens of tables, and a
    // map would allocate a node per table on every call).
    it.table = static_cast<size_t>(
        std::find(p.tables.begin(), p.tables.end(), l.table) - p.tables.begin());
    if (it.table == p.tables.size()) {
      p.tables.push_back(l.table);
      p.table_versions.push_back(l.table->weight().value().version());
    }
    if (p.tables.size() == 1) p.dtype = l.table->dtype();
    FERRY_CHECK(l.table->dtype() == p.dtype, InvalidArgument, op, ": table \"",
                l.table->name(), "\" is ", dtype_name(l.table->dtype()), " but table \"",
                p.tables.front()->name(), "\" is ", dtype_name(p.dtype),
                " (one lookup call needs one dtype)");
    it.first_bag = first_bag[static_cast<size_t>(it.key)];
    it.col_start = p.total_cols;
    p.total_cols += l.table->shard().num_cols;
    it.pooling = l.pooling;

    // Resolve ids to local rows, checking bounds against the whole table.
    const int64_t lo = p.offsets[it.first_bag], hi = p.offsets[it.first_bag + p.B];
    rows_at.push_back(p.row_storage.size());
    p.row_storage.resize(p.row_storage.size() + static_cast<size_t>(hi - lo));
    int64_t* rows = p.row_storage.data() + rows_at.back();
    resolve_rows(p, it, *l.table, ids, lo, hi, rows);
    it.rows = std::span<const int64_t>(rows, static_cast<size_t>(hi - lo));
    p.items.push_back(std::move(it));
  }
  // row_storage may have moved while it grew (a key looked up twice): point the rows again.
  for (size_t k = 0; k < p.items.size(); ++k) {
    Plan::Item& it = p.items[k];
    it.rows = std::span<const int64_t>(p.row_storage.data() + rows_at[k], it.rows.size());
  }
  if (mean_divisors.defined()) {
    FERRY_CHECK(mean_divisors.dim() == 1 &&
                    (mean_divisors.dtype() == DType::Int64 ||
                     mean_divisors.dtype() == DType::Int32) &&
                    mean_divisors.numel() + 1 == static_cast<int64_t>(p.offsets.size()),
                InvalidArgument, op, ": mean_divisors must be 1-D int32/int64 with ",
                p.offsets.size() - 1, " entries (one per bag, like the KJT's lengths), got ",
                shape_str(mean_divisors.shape()), " ", dtype_name(mean_divisors.dtype()));
    assign_i64(p.divisors, mean_divisors);
  }
  return p;
}

// ---- kernels ----

// A row of C values as an Eigen array: Eigen runs the element loop in whole SIMD registers
// (one AVX-512 operation for the usual 16 floats), element by element in the same order as a
// plain loop, so the results are the plain loop's bit for bit.
template <class T>
Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> vec(T* p, int64_t n) {
  return {p, n};
}
template <class T>
Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>> cvec(const T* p, int64_t n) {
  return {p, n};
}

// Rows are read at random places of tables larger than the caches: asking for the row of the
// id this many ids ahead hides most of each miss behind the work on the ids before it (what
// fbgemm's TBE kernels do on the CPU too).
constexpr int64_t kPrefetchAhead = 32;

// Items (or tables) per block when intra-op threads split a lookup or its backward: each costs
// tens of microseconds at a training batch, so a block of two is worth a helper thread.
constexpr int64_t kItemsPerChunk = 2;

// Asks for the cache lines of the row of an item's id j, if it has one in this block.
template <class T>
void prefetch_row(const T* W, std::span<const int64_t> rows, int64_t j, int64_t C) {
  if (j >= static_cast<int64_t>(rows.size()) || rows[static_cast<size_t>(j)] < 0) return;
  const char* row = reinterpret_cast<const char*>(W + rows[static_cast<size_t>(j)] * C);
  for (size_t line = 0; line < static_cast<size_t>(C) * sizeof(T); line += 64)
    __builtin_prefetch(row + line);
}

// One item's bags into out (row b at out + b * stride): each bag's sum starts at zero and adds
// its rows (times their weights, if any) in id order, then MEAN divides it by its divisor.
// kCols > 0 fixes the row length at compile time (row_kernels.h), so a bag's sum stays in
// registers and each id costs its row's loads and adds only; 0 takes the length from the table.
template <class T, int kCols>
void pool_item(const Plan& p, const Plan::Item& it, const T* W, int64_t C, const T* w, T* out,
               int64_t stride) {
  using Row = detail::RowArray<T, kCols>;
  const int64_t* offsets = p.offsets.data() + it.first_bag;
  const int64_t base = offsets[0];
  for (int64_t j = 0; j < kPrefetchAhead; ++j) prefetch_row(W, it.rows, j, C);
  Row acc(C);
  for (int64_t b = 0; b < p.B; ++b) {
    acc.setZero();
    const int64_t lo = offsets[b], hi = offsets[b + 1];
    for (int64_t i = lo; i < hi; ++i) {
      prefetch_row(W, it.rows, i - base + kPrefetchAhead, C);
      const int64_t r = it.rows[static_cast<size_t>(i - base)];
      if (r < 0) continue;
      const Eigen::Map<const Row> row(W + r * C, C);
      if (w != nullptr) {
        acc += w[i] * row;
      } else {
        acc += row;
      }
    }
    if (it.pooling == PoolingType::Mean) {
      const int64_t n = p.divisor(it, b);
      if (n > 0) acc /= static_cast<T>(n);
    }
    Eigen::Map<Row>(out + b * stride + it.col_start, C) = acc;
  }
}

// Items write their own columns of out: with intra-op threads, blocks of items run at once.
template <class T>
void pooled_forward(const Plan& p, const T* w, T* out) {
  const auto items = static_cast<int64_t>(p.items.size());
  ferry::detail::parallel_for(items, kItemsPerChunk, [&](int64_t first, int64_t last) {
    for (int64_t k = first; k < last; ++k) {
      const Plan::Item& it = p.items[static_cast<size_t>(k)];
      const EmbeddingTable& t = *p.tables[it.table];
      const T* W = t.weight().value().template data<T>();
      const int64_t C = t.shard().num_cols;
      detail::with_row_length(
          C, [&]<int kCols>() { pool_item<T, kCols>(p, it, W, C, w, out, p.total_cols); });
    }
  });
}

// gbar of bag b of item `it`: the upstream block, divided by n into buf (C values) for MEAN.
// kCols as in pool_item: a fixed length divides in whole registers (the same quotients).
template <class T, int kCols>
const T* bag_gradient(const Plan& p, const Plan::Item& it, int64_t b, const T* g, T* buf,
                      int64_t C) {
  const T* src = g + b * p.total_cols + it.col_start;
  if (it.pooling != PoolingType::Mean) return src;
  const int64_t n = p.divisor(it, b);
  const T tn = static_cast<T>(n > 0 ? n : 1);
  detail::row<T, kCols>(buf, C) = detail::row<T, kCols>(src, C) / tn;
  return buf;
}

// Table `slot`'s gradient from the items looking it up, delivered: a fused table steps its
// optimizer on the accumulated rows at once (as fbgemm's fused backward does: no gradient
// tensor is built), a non-fused one receives a SparseRowGradient. `visit(slot, row_of)` adds
// every occurrence's contribution into row_of(local row).
template <class T, class Visit>
void deliver_table_gradient(const Plan& p, size_t slot, Visit&& visit) {
  EmbeddingTable& t = *p.tables[slot];
  int64_t ids = 0;
  for (const Plan::Item& it : p.items)
    if (it.table == slot) ids += static_cast<int64_t>(it.rows.size());
  detail::RowAccumulator<T>* acc = detail::row_accumulator<T>();
  acc->begin(ids, t.shard().num_rows, t.shard().num_cols);
  for (const Plan::Item& it : p.items) {
    if (it.table != slot) continue;
    for (const int64_t r : it.rows) {
      if (r >= 0) acc->add_row(r);
    }
  }
  acc->zero_values();
  visit(slot, [acc](int64_t r) { return acc->row(r); });
  if (t.is_fused()) {
    Tensor weight = t.weight().value();
    t.fused_optimizer()->step(weight, acc->rows(), acc->values());
  } else {
    t.receive_gradient(acc->sorted(t.dtype()));
  }
}

// Calls f(i, r, gbar) for every occurrence i of `it` whose id is in the table's block (local
// row r), in bag and occurrence order, gbar being its bag's gradient (bag_gradient).
template <class T, int kCols, class F>
void for_each_gradient_row(const Plan& p, const Plan::Item& it, const T* g, std::vector<T>& buf,
                           F&& f) {
  const int64_t C = p.tables[it.table]->shard().num_cols;
  buf.resize(static_cast<size_t>(C));
  const int64_t* offsets = p.offsets.data() + it.first_bag;
  const int64_t base = offsets[0];  // it.rows[i - base] is the local row of the key's id i
  for (int64_t b = 0; b < p.B; ++b) {
    const int64_t lo = offsets[b], hi = offsets[b + 1];
    if (lo == hi) continue;
    const T* gb = bag_gradient<T, kCols>(p, it, b, g, buf.data(), C);
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t r = it.rows[static_cast<size_t>(i - base)];
      if (r >= 0) f(i, r, gb);
    }
  }
}

template <class T>
void pooled_backward(const Plan& p, const T* g, const T* w, T* dw,
                     const std::vector<bool>& table_needs) {
  if (dw != nullptr) {
    std::vector<T> buf;
    for (const Plan::Item& it : p.items) {
      const T* W = p.tables[it.table]->weight().value().template data<T>();
      const int64_t C = p.tables[it.table]->shard().num_cols;
      for_each_gradient_row<T, 0>(p, it, g, buf, [&](int64_t i, int64_t r, const T* gb) {
        T s = 0;
        for (int64_t d = 0; d < C; ++d) s += gb[d] * W[r * C + d];
        dw[i] += s;
      });
    }
  }
  // All per-sample-weight gradients are computed: now the tables may change (fused steps).
  // Each table's rows are accumulated and stepped apart from the others', so with intra-op
  // threads blocks of fused tables run at once. Tables that are not fused (their gradient added
  // to the table's own, for an optimizer run later) are not a step's hot path: they stay on the
  // calling thread.
  bool all_fused = true;
  for (size_t slot = 0; slot < p.tables.size(); ++slot)
    all_fused = all_fused && (!table_needs[slot] || p.tables[slot]->is_fused());
  const auto tables = static_cast<int64_t>(p.tables.size());
  ferry::detail::parallel_for(tables, all_fused ? kItemsPerChunk : tables,
                              [&](int64_t first, int64_t last) {
    thread_local std::vector<T> buf;  // a bag's gradient divided for MEAN, kept for the next call
    for (auto slot = static_cast<size_t>(first); slot < static_cast<size_t>(last); ++slot) {
      if (!table_needs[slot]) continue;
      deliver_table_gradient<T>(p, slot, [&](size_t s, auto&& row_of) {
        for (const Plan::Item& it : p.items) {
          if (it.table != s) continue;
          const int64_t C = p.tables[s]->shard().num_cols;
          detail::with_row_length(C, [&]<int kCols>() {
            for_each_gradient_row<T, kCols>(p, it, g, buf, [&](int64_t i, int64_t r,
                                                             const T* gb) {
              auto acc = detail::row<T, kCols>(row_of(r), C);
              if (w != nullptr) {
                acc += w[i] * detail::row<T, kCols>(gb, C);
              } else {
                acc += detail::row<T, kCols>(gb, C);
              }
            });
          });
        }
      });
    }
  });
}

class PooledLookup final : public Function {
 public:
  PooledLookup(Plan plan, bool weighted) : plan_(std::move(plan)), weighted_(weighted) {}
  ~PooledLookup() override {
    plan_.clear();
    ferry::detail::ThreadSpares<Plan>::give(std::move(plan_));
  }
  PooledLookup(const PooledLookup&) = delete;
  PooledLookup& operator=(const PooledLookup&) = delete;
  std::string name() const override { return "pooled_embedding_lookup"; }

  std::vector<Tensor> forward(Context&, const std::vector<Tensor>& in) override {
    Tensor out = empty({plan_.B, plan_.total_cols}, plan_.dtype);
    if (weighted_) weights_ = in.back().dtype() == plan_.dtype ? in.back() : in.back().to(plan_.dtype);
    visit_float([&]<class T>() {
      pooled_forward<T>(plan_, weighted_ ? weights_.data<T>() : nullptr, out.data<T>());
    });
    if (!weighted_) weights_ = Tensor();
    std::vector<Tensor> outs = ferry::detail::tensor_list(1);  // no list allocated per call
    outs[0] = std::move(out);
    return outs;
  }

  std::vector<Tensor> backward(Context& ctx, const std::vector<Tensor>& grads) override {
    const size_t nt = plan_.tables.size();
    thread_local std::vector<bool> table_needs;  // refilled by every call; capacity kept
    table_needs.assign(nt, false);
    for (size_t s = 0; s < nt; ++s) table_needs[s] = ctx.needs_input_grad(s);
    const bool weights_need = weighted_ && ctx.needs_input_grad(nt);
    if (weights_need) check_tables_unchanged();
    Tensor g = grads[0].dtype() == plan_.dtype ? grads[0] : grads[0].to(plan_.dtype);
    Tensor dw;
    if (weights_need) dw = zeros({weights_.numel()}, plan_.dtype);
    visit_float([&]<class T>() {
      pooled_backward<T>(plan_, g.data<T>(), weighted_ ? weights_.data<T>() : nullptr,
                         weights_need ? dw.data<T>() : nullptr, table_needs);
    });
    std::vector<Tensor> out = ferry::detail::tensor_list(nt + (weighted_ ? 1 : 0));
    if (weights_need) out[nt] = dw.dtype() == weights_dtype_ ? dw : dw.to(weights_dtype_);
    return out;
  }

  void set_weights_dtype(DType d) { weights_dtype_ = d; }

 private:
  template <class F>
  void visit_float(F&& f) {
    if (plan_.dtype == DType::Float32) {
      f.template operator()<float>();
    } else {
      f.template operator()<double>();
    }
  }
  void check_tables_unchanged() const {
    for (size_t s = 0; s < plan_.tables.size(); ++s) {
      FERRY_CHECK(plan_.tables[s]->weight().value().version() == plan_.table_versions[s],
                  InvalidArgument, plan_.op, ": table \"", plan_.tables[s]->name(),
                  "\" was modified after this lookup's forward (e.g. a fused optimizer step of "
                  "another lookup); the per-sample weights' gradient needs its rows as they were");
    }
  }

  Plan plan_;
  bool weighted_;
  Tensor weights_;  // the per-sample weights in the tables' dtype
  DType weights_dtype_ = DType::Float32;
};

template <class T>
void sequence_forward(const Plan& p, std::vector<Tensor>& outs) {
  for (size_t k = 0; k < p.items.size(); ++k) {
    const Plan::Item& it = p.items[k];
    const EmbeddingTable& t = *p.tables[it.table];
    const T* W = t.weight().value().template data<T>();
    const int64_t C = t.shard().num_cols;
    Tensor out = empty({static_cast<int64_t>(it.rows.size()), C}, p.dtype);
    T* o = out.data<T>();
    for (size_t i = 0; i < it.rows.size(); ++i) {
      const int64_t r = it.rows[i];
      if (r < 0) {
        std::fill(o + i * C, o + (i + 1) * C, T(0));
      } else {
        std::copy(W + r * C, W + (r + 1) * C, o + i * C);
      }
    }
    outs.push_back(out);
  }
}

template <class T>
void sequence_backward(const Plan& p, const std::vector<Tensor>& grads,
                       const std::vector<bool>& table_needs) {
  for (size_t slot = 0; slot < p.tables.size(); ++slot) {
    if (!table_needs[slot]) continue;
    deliver_table_gradient<T>(p, slot, [&](size_t s, auto&& row_of) {
      for (size_t k = 0; k < p.items.size(); ++k) {
        const Plan::Item& it = p.items[k];
        if (it.table != s) continue;
        const int64_t C = p.tables[s]->shard().num_cols;
        const T* g = grads[k].template data<T>();
        for (size_t i = 0; i < it.rows.size(); ++i) {
          if (it.rows[i] < 0) continue;
          T* acc = row_of(it.rows[i]);
          vec(acc, C) += cvec(g + i * C, C);
        }
      }
    });
  }
}

class SequenceLookup final : public Function {
 public:
  explicit SequenceLookup(Plan plan) : plan_(std::move(plan)) {}
  ~SequenceLookup() override {
    plan_.clear();
    ferry::detail::ThreadSpares<Plan>::give(std::move(plan_));
  }
  SequenceLookup(const SequenceLookup&) = delete;
  SequenceLookup& operator=(const SequenceLookup&) = delete;
  std::string name() const override { return "sequence_embedding_lookup"; }

  std::vector<Tensor> forward(Context&, const std::vector<Tensor>&) override {
    std::vector<Tensor> outs;
    if (plan_.dtype == DType::Float32) {
      sequence_forward<float>(plan_, outs);
    } else {
      sequence_forward<double>(plan_, outs);
    }
    return outs;
  }

  std::vector<Tensor> backward(Context& ctx, const std::vector<Tensor>& grads) override {
    std::vector<bool> table_needs(plan_.tables.size());
    for (size_t s = 0; s < table_needs.size(); ++s) table_needs[s] = ctx.needs_input_grad(s);
    std::vector<Tensor> g(grads.size());
    for (size_t k = 0; k < grads.size(); ++k) {
      g[k] = grads[k].dtype() == plan_.dtype ? grads[k] : grads[k].to(plan_.dtype);
    }
    if (plan_.dtype == DType::Float32) {
      sequence_backward<float>(plan_, g, table_needs);
    } else {
      sequence_backward<double>(plan_, g, table_needs);
    }
    return std::vector<Tensor>(plan_.tables.size());
  }

 private:
  Plan plan_;
};

}  // namespace

Variable pooled_embedding_lookup(const std::vector<FeatureLookup>& lookups,
                                 const KeyedJaggedTensor& kjt,
                                 const Variable& per_sample_weights,
                                 const Tensor& mean_divisors) {
  const char* op = "pooled_embedding_lookup";
  Plan plan = make_plan(op, lookups, kjt, mean_divisors);
  const bool weighted = per_sample_weights.defined();
  if (weighted) {
    const Tensor& w = per_sample_weights.value();
    FERRY_CHECK(w.dim() == 1 && w.numel() == kjt.values().numel() &&
                    (w.dtype() == DType::Float32 || w.dtype() == DType::Float64),
                InvalidArgument, op,
                ": per_sample_weights must be 1-D float32/float64 with one element per KJT "
                "value (",
                kjt.values().numel(), "), got ", shape_str(w.shape()), " ", dtype_name(w.dtype()));
  }
  // The inputs in a list an earlier call on this thread emptied (its capacity kept): a
  // collection has tens of tables, and a new list grew through as many allocations per call.
  ferry::detail::ScopedSpare<std::vector<Variable>> inputs;
  inputs->reserve(plan.tables.size() + 1);
  for (const auto& t : plan.tables) inputs->push_back(t->weight());
  if (weighted) inputs->push_back(per_sample_weights);
  auto fn = ferry::detail::make_pooled<PooledLookup>(std::move(plan), weighted);
  if (weighted) fn->set_weights_dtype(per_sample_weights.dtype());
  return ferry::detail::apply_first(fn, *inputs);
}

std::vector<Variable> sequence_embedding_lookup(const std::vector<FeatureLookup>& lookups,
                                                const KeyedJaggedTensor& kjt) {
  Plan plan = make_plan("sequence_embedding_lookup", lookups, kjt, Tensor());
  std::vector<Variable> inputs;
  for (const auto& t : plan.tables) inputs.push_back(t->weight());
  if (lookups.empty()) return {};
  return ferry::apply(ferry::detail::make_pooled<SequenceLookup>(std::move(plan)), inputs);
}

}  // namespace ferry::torchrec
