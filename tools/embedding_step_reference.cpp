// The unsharded reference of ferry-embedding-bench --sharded (see embedding_step_reference.h).
#include "tools/embedding_step_reference.h"

#include <ferry/autograd/grad_mode.h>
#include <ferry/collectives/collectives.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <string>

namespace ferry::embedding_bench {

namespace {

using namespace ferry::torchrec;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One feature's bags, copied out of the KJT once so the timed loop reads plain vectors.
struct Bags {
  std::vector<int64_t> ids, offsets;
};

// The plain loop the lookup is measured against (the one of ferry-embedding-bench's single-table
// mode): out.row(b) = sum of the table's rows of bag b, in KJT order.
void eigen_gather_sum(const Tensor& weight, const Bags& bags, RowMatrix<float>& out) {
  auto table = weight.matrix<float>();
  const auto n = static_cast<int64_t>(bags.offsets.size()) - 1;
  for (int64_t b = 0; b < n; ++b) {
    auto acc = out.row(b);
    acc.setZero();
    for (int64_t i = bags.offsets[static_cast<size_t>(b)];
         i < bags.offsets[static_cast<size_t>(b + 1)]; ++i)
      acc.noalias() += table.row(bags.ids[static_cast<size_t>(i)]);
  }
}

}  // namespace

UnshardedReference unsharded_reference(const std::vector<EmbeddingBagConfig>& configs,
                                       const std::vector<KeyedJaggedTensor>& globals,
                                       uint64_t seed, const Group& world) {
  FERRY_CHECK(!globals.empty(), InvalidArgument, "unsharded_reference: no batch");
  const int W = world.size(), me = world.rank();
  const int64_t GB = globals[0].stride();
  std::vector<int64_t> col_of;  // each table's first output column
  int64_t cols = 0;
  for (const auto& c : configs) {
    col_of.push_back(cols);
    cols += c.embedding_dim * static_cast<int64_t>(c.feature_names.size());
  }
  std::vector<size_t> mine;
  for (size_t t = static_cast<size_t>(me); t < configs.size(); t += static_cast<size_t>(W))
    mine.push_back(t);

  UnshardedReference ref;
  ref.pooled = zeros({GB, cols}, DType::Float32);
  // [0]: Eigen ids/s, [1]: lookup ids/s, [2]: 1 when this rank owns tables (for the mean).
  Tensor rates = zeros({3}, DType::Float64);
  std::optional<EmbeddingBagCollection> ebc;  // none on a rank without tables (W > tables)
  if (!mine.empty()) {
    std::vector<EmbeddingBagConfig> my_configs;
    for (size_t t : mine) my_configs.push_back(configs[t]);
    ebc.emplace(my_configs, /*is_weighted=*/false, seed);
  }
  {
    NoGradGuard no_grad;
    // Each timing pass reads another batch: a pass over the ids the previous pass read would
    // find many of their rows in the 32 MiB L3, which the sharded steps (a new batch each) do
    // not. So all lookup passes run first, then all Eigen passes, each over batches 0, 1, ...
    std::vector<double> lookup_rate, eigen_rate, checksums;  // per pass
    std::vector<double> ids(globals.size(), 0.0);
    // The ranks time together, as they run the sharded steps (each rank's initialisation ends
    // at another time: without the barrier the passes of W > cores ranks would run alone).
    barrier(world).wait();
    for (size_t g = 0; g < globals.size() && ebc; ++g) {
      const auto t0 = std::chrono::steady_clock::now();
      const Tensor out = ebc->forward(globals[g]).values.value();
      const double s = seconds_since(t0);
      for (size_t t : mine)
        for (const auto& f : configs[t].feature_names)
          ids[g] += static_cast<double>(globals[g][f].values().numel());
      lookup_rate.push_back(ids[g] / s);
      double sum = 0;
      for (int64_t i = 0; i < out.numel(); ++i) sum += out.get_flat(i);
      checksums.push_back(sum);
      if (g != 0) continue;
      // The output's blocks in config order; the blocks of other ranks' tables stay zero, so
      // the all_reduce below is an exact assembly.
      auto dst = ref.pooled.matrix<float>();
      auto src = out.matrix<float>();
      int64_t src_col = 0;
      for (size_t t : mine) {
        const int64_t w =
            configs[t].embedding_dim * static_cast<int64_t>(configs[t].feature_names.size());
        dst.middleCols(col_of[t], w) = src.middleCols(src_col, w);
        src_col += w;
      }
    }
    barrier(world).wait();
    for (size_t g = 0; g < globals.size() && ebc; ++g) {
      std::vector<std::pair<const EmbeddingTable*, Bags>> work;  // copied out before timing
      for (size_t j = 0; j < mine.size(); ++j) {
        for (const auto& f : configs[mine[j]].feature_names) {
          const JaggedTensor jt = globals[g][f];
          Bags bags{jt.values().to_vector<int64_t>(), jt.offsets().to_vector<int64_t>()};
          work.emplace_back(ebc->tables()[j].get(), std::move(bags));
        }
      }
      RowMatrix<float> acc;
      double checksum = 0;
      const auto t0 = std::chrono::steady_clock::now();
      for (const auto& [table, bags] : work) {
        const Tensor& w = table->weight().value();
        if (acc.cols() != w.size(1)) acc.resize(GB, w.size(1));
        eigen_gather_sum(w, bags, acc);
        checksum += static_cast<double>(acc.sum());  // keeps every table's loop observable
      }
      eigen_rate.push_back(ids[g] / seconds_since(t0));
      FERRY_CHECK(std::abs(checksums[g] - checksum) <= 1e-3 * (1 + std::abs(checksum)),
                  InvalidArgument, "ferry-embedding-bench: rank ", me,
                  ": the Eigen loop's checksum ", checksum, " differs from the lookup's ",
                  checksums[g]);
    }
    if (ebc) {
      rates.set_flat(0, median(eigen_rate));
      rates.set_flat(1, median(lookup_rate));
      rates.set_flat(2, 1.0);
    }
  }
  all_reduce(ref.pooled, world).wait();
  all_reduce(rates, world).wait();
  const double owners = std::max(1.0, rates.get_flat(2));
  ref.eigen_ids_per_s = rates.get_flat(0) / owners;
  ref.lookup_ids_per_s = rates.get_flat(1) / owners;
  const Tensor& p = ref.pooled;
  ref.max_abs = p.numel() == 0 ? 0.0 : static_cast<double>(p.matrix<float>().cwiseAbs().maxCoeff());
  return ref;
}

}  // namespace ferry::embedding_bench
