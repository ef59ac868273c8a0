#include <ferry/collectives/torchrec/dist_data/inference_dists.h>

#include <ferry/autograd/ops.h>
#include <ferry/collectives/torchrec/sparse/jagged_kernels.h>
#include <ferry/runtime/error.h>

#include <utility>

namespace ferry::torchrec {

using detail::list_str;

namespace {

void check_world(int world_size, const char* where) {
  FERRY_CHECK(world_size >= 1, InvalidArgument, where, ": world_size ", world_size,
              " must be >= 1");
}

void check_count(const std::vector<Variable>& tensors, int world_size, bool exact,
                 const char* where) {
  const size_t n = tensors.size();
  FERRY_CHECK(n >= 1 && (exact ? n == static_cast<size_t>(world_size)
                               : n <= static_cast<size_t>(world_size)),
              InvalidArgument, where, ": got ", n, " tensors, expected ",
              exact ? "exactly " : "1 to ", world_size, " (one per rank)");
  for (size_t k = 0; k < n; ++k)
    FERRY_CHECK(tensors[k].defined(), InvalidArgument, where, ": tensor ", k, " is undefined");
}

}  // namespace

KJTOneToAll::KJTOneToAll(std::vector<int64_t> splits, int world_size)
    : splits_(std::move(splits)), world_size_(world_size) {
  check_world(world_size_, "KJTOneToAll");
  FERRY_CHECK(splits_.size() == static_cast<size_t>(world_size_), InvalidArgument,
              "KJTOneToAll: splits ", list_str(splits_), " has ", splits_.size(),
              " entries for world_size ", world_size_);
  for (int64_t s : splits_)
    FERRY_CHECK(s >= 0, InvalidArgument, "KJTOneToAll: splits ", list_str(splits_),
                " has a negative entry");
}

Awaitable<std::vector<KeyedJaggedTensor>> KJTOneToAll::forward(const KeyedJaggedTensor& kjt) const {
  int64_t total = 0;
  for (int64_t s : splits_) total += s;
  FERRY_CHECK(total == kjt.num_keys(), InvalidArgument, "KJTOneToAll: splits ", list_str(splits_),
              " cover ", total, " keys, the KJT has ", kjt.num_keys());
  return NoWait<std::vector<KeyedJaggedTensor>>(kjt.split(splits_));
}

EmbeddingsAllToOne::EmbeddingsAllToOne(int world_size, int64_t cat_dim)
    : world_size_(world_size), cat_dim_(cat_dim) {
  check_world(world_size_, "EmbeddingsAllToOne");
  FERRY_CHECK(cat_dim_ >= 0, InvalidArgument, "EmbeddingsAllToOne: cat_dim ", cat_dim_,
              " must be >= 0");
}

Variable EmbeddingsAllToOne::forward(const std::vector<Variable>& tensors) const {
  check_count(tensors, world_size_, false, "EmbeddingsAllToOne");
  if (world_size_ == 1) return tensors[0];
  for (size_t k = 0; k < tensors.size(); ++k)
    FERRY_CHECK(tensors[k].value().dim() > cat_dim_, InvalidArgument, "EmbeddingsAllToOne: tensor ",
                k, " of shape ", list_str(tensors[k].value().shape()), " has no dim ", cat_dim_);
  return cat(tensors, cat_dim_);
}

EmbeddingsAllToOneReduce::EmbeddingsAllToOneReduce(int world_size) : world_size_(world_size) {
  check_world(world_size_, "EmbeddingsAllToOneReduce");
}

Variable EmbeddingsAllToOneReduce::forward(const std::vector<Variable>& tensors) const {
  check_count(tensors, world_size_, true, "EmbeddingsAllToOneReduce");
  for (size_t k = 1; k < tensors.size(); ++k)
    FERRY_CHECK(tensors[k].value().shape() == tensors[0].value().shape(), InvalidArgument,
                "EmbeddingsAllToOneReduce: tensor ", k, " has shape ",
                list_str(tensors[k].value().shape()), ", tensor 0 ",
                list_str(tensors[0].value().shape()));
  Variable sum = tensors[0];
  for (size_t k = 1; k < tensors.size(); ++k) sum = add(sum, tensors[k]);
  return sum;
}

SeqEmbeddingsAllToOne::SeqEmbeddingsAllToOne(int world_size) : world_size_(world_size) {
  check_world(world_size_, "SeqEmbeddingsAllToOne");
}

std::vector<Variable> SeqEmbeddingsAllToOne::forward(const std::vector<Variable>& tensors) const {
  check_count(tensors, world_size_, false, "SeqEmbeddingsAllToOne");
  return tensors;
}

}  // namespace ferry::torchrec
