// torchrec's single-process inference dists (dist_data.py): KJTOneToAll (the input dist of sharded
// inference), EmbeddingsAllToOne (table- / column-wise output), EmbeddingsAllToOneReduce (row-wise
// output) and SeqEmbeddingsAllToOne (sequence output).
//
// Interpretation. torchrec runs sharded inference in one process over several GPUs: the input
// dist splits the KJT by feature and copies part k to device k, the output dists copy every
// device's embeddings to one device and merge them. Ferry has one address space and no device
// type, so here the "devices" are the ranks 0..world_size-1 of a local group (the local
// transport's ranks are threads of this process): part k of KJTOneToAll is what rank k looks
// up, and the all-to-one modules take the per-rank results in rank order and merge them on the
// caller. A device copy is a no-op in one address space, so nothing is copied that need not
// be: KJTOneToAll's parts are views of the input KJT's buffers (KJTs are immutable handles,
// safe to read from several threads), SeqEmbeddingsAllToOne returns its inputs. No collective
// runs, so unlike the training dists these take no group and no codecs (torchrec's take no
// codecs either). The merges are autograd ops (cat, add), so gradients flow if anyone asks.
//
//   KJTOneToAll input_dist({2, 1}, 2);
//   std::vector<KeyedJaggedTensor> parts = input_dist.forward(kjt).wait();  // keys {a,b}, {c}
//   // rank k of a local world looks up parts[k] -> pooled[k] [B, D_k]
//   Variable y = EmbeddingsAllToOne(2, /*cat_dim=*/1).forward(pooled);      // [B, D_0 + D_1]
#pragma once

#include <ferry/autograd/variable.h>
#include <ferry/collectives/torchrec/sparse/keyed_jagged_tensor.h>
#include <ferry/runtime/awaitable.h>

#include <cstdint>
#include <vector>

namespace ferry::torchrec {

class KJTOneToAll {
 public:
  // splits[k]: number of consecutive keys for rank k; world_size entries, non-negative.
  KJTOneToAll(std::vector<int64_t> splits, int world_size);
  // The KJT split by keys (sum(splits) == kjt.num_keys(), else InvalidArgument); a NoWait, as
  // torchrec's (its KJTList awaitable).
  Awaitable<std::vector<KeyedJaggedTensor>> forward(const KeyedJaggedTensor& kjt) const;
  Awaitable<std::vector<KeyedJaggedTensor>> operator()(const KeyedJaggedTensor& kjt) const {
    return forward(kjt);
  }
  const std::vector<int64_t>& splits() const { return splits_; }
  int world_size() const { return world_size_; }

 private:
  std::vector<int64_t> splits_;
  int world_size_;
};

class EmbeddingsAllToOne {
 public:
  // cat_dim: 1 for pooled embeddings ([B, D_k] side by side), 0 for sequence ones.
  EmbeddingsAllToOne(int world_size, int64_t cat_dim);
  // 1..world_size tensors (rank order) concatenated along cat_dim; world_size 1 returns
  // tensors[0] itself. Returns the tensor directly, as torchrec's does.
  Variable forward(const std::vector<Variable>& tensors) const;
  Variable operator()(const std::vector<Variable>& tensors) const { return forward(tensors); }
  int world_size() const { return world_size_; }
  int64_t cat_dim() const { return cat_dim_; }

 private:
  int world_size_;
  int64_t cat_dim_;
};

class EmbeddingsAllToOneReduce {
 public:
  explicit EmbeddingsAllToOneReduce(int world_size);
  // Exactly world_size tensors of one shape, summed element-wise (row-wise partial sums).
  Variable forward(const std::vector<Variable>& tensors) const;
  Variable operator()(const std::vector<Variable>& tensors) const { return forward(tensors); }
  int world_size() const { return world_size_; }

 private:
  int world_size_;
};

class SeqEmbeddingsAllToOne {
 public:
  explicit SeqEmbeddingsAllToOne(int world_size);
  // At most world_size tensors, returned as they are (the device copy is a no-op here).
  std::vector<Variable> forward(const std::vector<Variable>& tensors) const;
  std::vector<Variable> operator()(const std::vector<Variable>& tensors) const {
    return forward(tensors);
  }
  int world_size() const { return world_size_; }

 private:
  int world_size_;
};

}  // namespace ferry::torchrec
