// The averaging of the data_parallel tables' gradients (reduce_data_parallel_gradients) and their
// optimizers' steps. Each rank holds the sparse row gradient of its own batch; the average on
// every rank is the sum over the ranks / W, the rows touched on any rank.
//
// Two ways, chosen per table and step from the row counts every rank announces (one small
// all_gather for all tables), except for small tables, which always go dense (kAlwaysDense):
//   sparse  every rank's touched rows and their gradients are all-gathered and summed in rank
//           order: the bytes are those of the rows touched, so a large table touched by few
//           ids costs little (torchrec puts only small tables in data_parallel, but a plan may
//           not);
//   dense   a [rows, dim + 1] buffer (gradient and a touched flag per row) is all-reduced, one
//           buffer for all such tables of one dtype: cheaper when the ranks touch, together,
//           more rows than the table has.
// Both give the same rows; their sums may differ in the last bit (another summation order).
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/torchrec/sharding/data_parallel_tables.h>
#include <ferry/runtime/error.h>
#include <ferry/runtime/object_pool.h>

#include <algorithm>
#include <array>
#include <map>
#include <utility>

namespace ferry::torchrec::detail {
namespace {

// The tables of one step's reduction, by pointer, in lists this thread keeps from step to step
// (ferry::detail::ScopedSpare): a step's reduction allocates none of them.
using TableList = std::vector<EmbeddingTable*>;
using ferry::detail::ScopedSpare;

// Replaces `table`'s gradient by the sum over the ranks (`rows`, `sums`) divided by W.
void install_average(EmbeddingTable& table, const std::vector<int64_t>& rows, const Tensor& sums,
                     int W) {
  SparseRowGradient avg(from_vector(rows), sums);
  avg.scale_(1.0 / W);
  table.zero_sparse_grad();
  table.receive_gradient(std::move(avg));
}

// A table whose dense buffer holds at most this many bytes goes the dense way at every step
// without asking the ranks' row counts: the count round is a collective of its own (a
// synchronisation of the ranks), and an all_reduce this small costs about what such a round does
// whatever the rows. torchrec's usual data_parallel tables (the small ones) all fall here, so their
// step is one all_reduce.
constexpr int64_t kAlwaysDenseBytes = 64 << 10;

bool always_dense(const EmbeddingTable& t) {
  return t.total_rows() * (t.total_cols() + 1) * static_cast<int64_t>(dtype_size(t.dtype())) <=
         kAlwaysDenseBytes;
}

// Table rows [R, D + 1] (the gradient, then 1 where this rank touched the row) of `g` into
// `buf`, zeroed first.
template <class T>
void pack_dense(const SparseRowGradient& g, int64_t R, int64_t D, T* buf) {
  std::fill(buf, buf + R * (D + 1), T(0));
  if (g.empty()) return;
  const int64_t* r = g.rows().data<int64_t>();
  const T* v = g.values().data<T>();
  for (int64_t i = 0; i < g.num_rows(); ++i) {
    T* dst = buf + r[i] * (D + 1);
    std::copy(v + i * D, v + (i + 1) * D, dst);
    dst[D] = T(1);
  }
}

// The rows some rank touched (flag not 0), ascending, and their summed gradients, out of a
// reduced [R, D + 1] buffer.
template <class T>
void unpack_dense(const T* buf, int64_t R, int64_t D, DType dtype, std::vector<int64_t>& rows,
                  Tensor& values) {
  rows.clear();
  for (int64_t r = 0; r < R; ++r)
    if (buf[r * (D + 1) + D] != T(0)) rows.push_back(r);
  values = empty({static_cast<int64_t>(rows.size()), D}, dtype);
  T* out = values.data<T>();
  for (size_t i = 0; i < rows.size(); ++i) {
    const T* src = buf + rows[i] * (D + 1);
    std::copy(src, src + D, out + static_cast<int64_t>(i) * D);
  }
}

// Averages the tables' gradients through one all_reduce per dtype of dense buffers.
void reduce_dense(const TableList& tables, const Group& world) {
  const int W = world.size();
  // One buffer per dtype (float32 first), each table's rows one after the other.
  std::array<Tensor, 2> flat;
  std::array<int64_t, 2> elements{0, 0};
  auto kind = [](DType d) { return d == DType::Float64 ? 1 : 0; };
  for (const auto& table : tables)
    elements[kind(table->dtype())] += table->total_rows() * (table->total_cols() + 1);
  for (int k = 0; k < 2; ++k)
    if (elements[k] > 0) flat[k] = empty({elements[k]}, k == 1 ? DType::Float64 : DType::Float32);
  std::array<int64_t, 2> used{0, 0};
  ScopedSpare<std::vector<int64_t>> offsets_list, rows_list;
  std::vector<int64_t>& offsets = *offsets_list;
  for (const auto& table : tables) {
    const int64_t R = table->total_rows(), D = table->total_cols();
    const int k = kind(table->dtype());
    offsets.push_back(used[k]);
    if (k == 1) {
      pack_dense(table->sparse_grad(), R, D, flat[k].data<double>() + used[k]);
    } else {
      pack_dense(table->sparse_grad(), R, D, flat[k].data<float>() + used[k]);
    }
    used[k] += R * (D + 1);
  }
  std::array<Work, 2> works;
  for (int k = 0; k < 2; ++k)
    if (flat[k].defined()) works[k] = all_reduce(flat[k], world);
  for (Work& w : works) w.wait();  // a default Work is complete
  std::vector<int64_t>& rows = *rows_list;
  for (size_t t = 0; t < tables.size(); ++t) {
    const int64_t R = tables[t]->total_rows(), D = tables[t]->total_cols();
    const int k = kind(tables[t]->dtype());
    Tensor values;
    if (k == 1) {
      unpack_dense(flat[k].data<double>() + offsets[t], R, D, DType::Float64, rows, values);
    } else {
      unpack_dense(flat[k].data<float>() + offsets[t], R, D, DType::Float32, rows, values);
    }
    install_average(*tables[t], rows, values, W);
  }
}

// What one table's sparse exchange receives.
struct Gathered {
  std::vector<int64_t> counts;  // rows per rank
  Tensor rows, values;          // all ranks' rows [sum counts] and values [sum counts * D]
};

// Sums the gathered rows in rank order into `table`'s gradient, averaged (rows ascending).
void combine(const Gathered& g, EmbeddingTable& table, int W) {
  const int64_t D = table.total_cols();
  const DType dtype = table.dtype();
  const std::vector<int64_t> all_rows = g.rows.to_vector<int64_t>();
  std::map<int64_t, int64_t> slot;  // row -> its place in the result, ascending
  for (int64_t r : all_rows) slot.emplace(r, 0);
  int64_t n = 0;
  for (auto& [row, place] : slot) place = n++;
  Tensor sums = zeros({n, D}, dtype);
  const auto accumulate = [&](auto* sum, const auto* value) {
    for (size_t i = 0; i < all_rows.size(); ++i) {
      auto* dst = sum + slot[all_rows[i]] * D;
      const auto* src = value + static_cast<int64_t>(i) * D;
      for (int64_t d = 0; d < D; ++d) dst[d] += src[d];
    }
  };
  if (dtype == DType::Float64) {
    accumulate(static_cast<double*>(sums.raw_data()),
               static_cast<const double*>(g.values.raw_data()));
  } else {
    accumulate(static_cast<float*>(sums.raw_data()),
               static_cast<const float*>(g.values.raw_data()));
  }
  std::vector<int64_t> rows;
  rows.reserve(slot.size());
  for (const auto& [row, place] : slot) rows.push_back(row);
  install_average(table, rows, sums, W);
}

// The tables that need the ranks' row counts to choose their way, and `dense`, those that go
// the dense way whatever they are.
void reduce_by_counts(const TableList& tables, TableList& dense, const Group& world) {
  const int W = world.size();
  const int64_t T = static_cast<int64_t>(tables.size());
  // Every rank's touched row count of every table: [W, T].
  Tensor mine = empty({T}, DType::Int64);
  for (int64_t t = 0; t < T; ++t)
    mine.set_flat(t, tables[static_cast<size_t>(t)]->sparse_grad().num_rows());
  Tensor counts = empty({W * T}, DType::Int64);
  all_gather(mine, counts, world).wait();

  std::vector<size_t> sparse;  // indices into tables
  std::vector<Gathered> gathered;
  std::vector<Work> works;
  for (int64_t t = 0; t < T; ++t) {
    const auto& table = tables[static_cast<size_t>(t)];
    Gathered g;
    int64_t total = 0;
    for (int w = 0; w < W; ++w) {
      g.counts.push_back(static_cast<int64_t>(counts.get_flat(w * T + t)));
      total += g.counts.back();
    }
    if (total >= table->total_rows()) {
      dense.push_back(table);
      continue;
    }
    const int64_t D = table->total_cols();
    const SparseRowGradient& mine_g = table->sparse_grad();
    Tensor my_rows = mine_g.empty() ? empty({0}, DType::Int64) : mine_g.rows();
    Tensor my_values =
        mine_g.empty() ? empty({0}, table->dtype()) : mine_g.values().reshape({-1});
    std::vector<int64_t> value_counts;
    for (int64_t c : g.counts) value_counts.push_back(c * D);
    g.rows = empty({total}, DType::Int64);
    g.values = empty({total * D}, table->dtype());
    works.push_back(all_gather_v(my_rows, g.rows, g.counts, world));
    works.push_back(all_gather_v(my_values, g.values, value_counts, world));
    sparse.push_back(static_cast<size_t>(t));
    gathered.push_back(std::move(g));
  }
  if (!dense.empty()) reduce_dense(dense, world);
  wait_all(works);
  for (size_t k = 0; k < sparse.size(); ++k) combine(gathered[k], *tables[sparse[k]], W);
}

}  // namespace

std::vector<std::shared_ptr<EmbeddingTable>> data_parallel_tables(const ShardedTables& tables) {
  std::vector<std::shared_ptr<EmbeddingTable>> out;
  for (const auto& t : tables.tables())
    if (t.sharding.sharding_type == ShardingType::DATA_PARALLEL) out.push_back(t.tables.front());
  return out;
}

bool has_data_parallel_tables(const ShardedTables& tables) {
  for (const auto& t : tables.tables())
    if (t.sharding.sharding_type == ShardingType::DATA_PARALLEL) return true;
  return false;
}

void reduce_data_parallel_gradients(const ShardedTables& sharded) {
  const Group& world = sharded.world();
  if (world.size() == 1) return;  // the average of one rank's gradient is itself
  ScopedSpare<TableList> dense_list, undecided_list;
  TableList& dense = *dense_list;
  TableList& undecided = *undecided_list;
  for (const auto& t : sharded.tables()) {
    if (t.sharding.sharding_type != ShardingType::DATA_PARALLEL) continue;
    EmbeddingTable* table = t.tables.front().get();
    (always_dense(*table) ? dense : undecided).push_back(table);
  }
  if (dense.empty() && undecided.empty()) return;
  if (undecided.empty()) {
    reduce_dense(dense, world);
    return;
  }
  reduce_by_counts(undecided, dense, world);
}

void DataParallelOptimizers::step(const ShardedTables& tables) {
  FERRY_CHECK(tables.fused().has_value(), InvalidArgument, tables.name(),
              "::step_data_parallel: the collection has no optimizer config");
  reduce_data_parallel_gradients(tables);
  for (const auto& t : tables.tables())
    if (t.sharding.sharding_type == ShardingType::DATA_PARALLEL)
      t.tables.front()->step(get(t.config, *tables.fused()));
}

SparseOptimizer& DataParallelOptimizers::get(const EmbeddingBagConfig& config,
                                             const FusedOptimizerConfig& fused) {
  auto it = optimizers_.find(config.name);
  if (it == optimizers_.end())
    it = optimizers_
             .emplace(config.name, SparseOptimizer(fused, config.num_embeddings,
                                                   config.embedding_dim, config.data_type))
             .first;
  return it->second;
}

const SparseOptimizer* DataParallelOptimizers::find(const std::string& table) const {
  auto it = optimizers_.find(table);
  return it == optimizers_.end() ? nullptr : &it->second;
}

}  // namespace ferry::torchrec::detail
