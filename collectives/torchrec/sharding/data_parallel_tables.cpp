// The averaging of the data_parallel tables' gradients (reduce_data_parallel_gradients) and their
// optimizers' steps. Each rank holds the sparse row gradient of its own batch; the average on
// every rank is the sum over the ranks / W, the rows touched on any rank.
//
// Two ways, chosen per table and step from the row counts every rank announces (one small
// all_gather for all tables):
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

#include <map>

namespace ferry::torchrec::detail {
namespace {

// Replaces `table`'s gradient by the sum over the ranks (`rows`, `sums`) divided by W.
void install_average(EmbeddingTable& table, const std::vector<int64_t>& rows, const Tensor& sums,
                     int W) {
  SparseRowGradient avg(from_vector(rows), sums);
  avg.scale_(1.0 / W);
  table.zero_sparse_grad();
  table.receive_gradient(avg);
}

// Averages the tables' gradients through one all_reduce per dtype of dense buffers.
void reduce_dense(const std::vector<std::shared_ptr<EmbeddingTable>>& tables, const Group& world) {
  const int W = world.size();
  std::map<DType, int64_t> elements;
  for (const auto& table : tables)
    elements[table->dtype()] += table->total_rows() * (table->total_cols() + 1);
  std::map<DType, Tensor> flat;
  std::map<DType, int64_t> used;
  for (const auto& [dtype, n] : elements) flat[dtype] = zeros({n}, dtype);
  std::vector<Tensor> bufs;
  for (const auto& table : tables) {
    const int64_t R = table->total_rows(), D = table->total_cols();
    const DType dtype = table->dtype();
    Tensor buf = flat[dtype].narrow(0, used[dtype], R * (D + 1)).reshape({R, D + 1});
    used[dtype] += R * (D + 1);
    const SparseRowGradient& g = table->sparse_grad();
    if (!g.empty()) {
      const std::vector<int64_t> rows = g.rows().to_vector<int64_t>();
      for (size_t i = 0; i < rows.size(); ++i) {
        buf.select(rows[i]).narrow(0, 0, D).copy_(g.values().select(static_cast<int64_t>(i)));
        buf.set_flat(rows[i] * (D + 1) + D, 1.0);
      }
    }
    bufs.push_back(buf);
  }
  std::vector<Work> works;
  for (auto& [dtype, t] : flat) works.push_back(all_reduce(t, world));
  wait_all(works);
  for (size_t k = 0; k < tables.size(); ++k) {
    const Tensor& buf = bufs[k];
    const int64_t R = tables[k]->total_rows(), D = tables[k]->total_cols();
    std::vector<int64_t> rows;
    for (int64_t r = 0; r < R; ++r)
      if (buf.get_flat(r * (D + 1) + D) != 0.0) rows.push_back(r);
    Tensor values = empty({static_cast<int64_t>(rows.size()), D}, tables[k]->dtype());
    for (size_t i = 0; i < rows.size(); ++i)
      values.select(static_cast<int64_t>(i)).copy_(buf.select(rows[i]).narrow(0, 0, D));
    install_average(*tables[k], rows, values, W);
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

}  // namespace

std::vector<std::shared_ptr<EmbeddingTable>> data_parallel_tables(const ShardedTables& tables) {
  std::vector<std::shared_ptr<EmbeddingTable>> out;
  for (const auto& t : tables.tables())
    if (t.sharding.sharding_type == ShardingType::DATA_PARALLEL) out.push_back(t.tables.front());
  return out;
}

void reduce_data_parallel_gradients(const ShardedTables& sharded) {
  const std::vector<std::shared_ptr<EmbeddingTable>> tables = data_parallel_tables(sharded);
  const Group& world = sharded.world();
  const int W = world.size();
  const int64_t T = static_cast<int64_t>(tables.size());
  if (T == 0) return;
  if (W == 1) return;  // the average of one rank's gradient is itself
  // Every rank's touched row count of every table: [W, T].
  Tensor mine = empty({T}, DType::Int64);
  for (int64_t t = 0; t < T; ++t)
    mine.set_flat(t, tables[static_cast<size_t>(t)]->sparse_grad().num_rows());
  Tensor counts = empty({W * T}, DType::Int64);
  all_gather(mine, counts, world).wait();

  std::vector<std::shared_ptr<EmbeddingTable>> dense;
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
