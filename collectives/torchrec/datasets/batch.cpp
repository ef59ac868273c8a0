#include <ferry/collectives/torchrec/datasets/batch.h>

#include <ferry/runtime/error.h>

#include <algorithm>
#include <utility>

namespace ferry::torchrec {

ShardSchedule::ShardSchedule(int64_t num_samples, const ShardOptions& options)
    : n_(num_samples), options_(options) {
  FERRY_CHECK(num_samples >= 0 && options.batch_size >= 1 && options.world_size >= 1 &&
                  options.rank >= 0 && options.rank < options.world_size,
              InvalidArgument, "ShardSchedule: need num_samples >= 0, batch_size >= 1 and 0 <= "
              "rank < world_size (got ", num_samples, " samples, batch_size ",
              options.batch_size, ", rank ", options.rank, " of ", options.world_size, ")");
  const int64_t b = options.batch_size;
  const int64_t w = options.world_size;
  const int64_t batches = options.drop_last ? n_ / b : (n_ + b - 1) / b;
  if (options.even_batches) {
    mine_ = batches / w;
  } else {
    mine_ = batches > options.rank ? (batches - options.rank + w - 1) / w : 0;
  }
}

int64_t ShardSchedule::first_sample(int64_t i) const {
  FERRY_CHECK(i >= 0 && i < mine_, InvalidArgument, "ShardSchedule: batch ", i,
              " out of range (this rank has ", mine_, ")");
  return (i * options_.world_size + options_.rank) * options_.batch_size;
}

int64_t ShardSchedule::batch_size(int64_t i) const {
  return std::min(options_.batch_size, n_ - first_sample(i));
}

std::vector<std::string> criteo_sparse_keys(int64_t num_sparse) {
  std::vector<std::string> keys;
  for (int64_t t = 0; t < num_sparse; ++t) keys.push_back(std::string("cat_").append(std::to_string(t)));
  return keys;
}

namespace detail {

BatchBuilder::BatchBuilder(int64_t num_dense, std::vector<std::string> keys, int64_t capacity)
    : num_dense_(num_dense), keys_(std::move(keys)), ids_(keys_.size()),
      lengths_(keys_.size()) {
  dense_.reserve(static_cast<size_t>(capacity * num_dense));
  labels_.reserve(static_cast<size_t>(capacity));
  for (auto& l : lengths_) l.reserve(static_cast<size_t>(capacity));
}

void BatchBuilder::add(const std::vector<float>& dense,
                       const std::vector<std::vector<int64_t>>& bags, float label) {
  dense_.insert(dense_.end(), dense.begin(), dense.end());
  for (size_t t = 0; t < keys_.size(); ++t) {
    ids_[t].insert(ids_[t].end(), bags[t].begin(), bags[t].end());
    lengths_[t].push_back(static_cast<int64_t>(bags[t].size()));
  }
  labels_.push_back(label);
}

Batch BatchBuilder::finish() {
  const auto b = static_cast<int64_t>(labels_.size());
  std::vector<int64_t> values, lengths;
  for (size_t t = 0; t < keys_.size(); ++t) {
    values.insert(values.end(), ids_[t].begin(), ids_[t].end());
    lengths.insert(lengths.end(), lengths_[t].begin(), lengths_[t].end());
  }
  Batch batch;
  batch.dense = from_vector<float>(dense_, {b, num_dense_});
  batch.labels = from_vector<float>(labels_);
  batch.sparse = KeyedJaggedTensor::from_lengths_sync(keys_, from_vector<int64_t>(values),
                                                      from_vector<int64_t>(lengths), {}, b);
  return batch;
}

}  // namespace detail

}  // namespace ferry::torchrec
