// The awaitables the embedding output dists return (torchrec dist_data.py):
// PooledEmbeddingsAwaitable and SequenceEmbeddingsAwaitable.
//
// Both wrap the Awaitable<Variable> of a comm op (comm_ops.h) and are themselves
// Awaitable<Variable>s: wait() waits the inner request (running the inner awaitable's callbacks),
// then applies this awaitable's own callbacks in order. The dist modules append their callbacks
// (PooledEmbeddingsAllToAll: the module's list, e.g. the column permutation of column-wise
// sharding; SequenceEmbeddingsAllToAll: the unbucketize permutation of row-wise sharding) to the
// new awaitable, and the sharded collection may append more before it waits.
//
//   PooledEmbeddingsAwaitable a = dist.forward(local_embs);   // in flight
//   a.then([](Variable y) { return y * 2.0; });                 // after the module's callbacks
//   Variable y = a.wait();
//
// Like every differentiable request, the inner one may be waited once: a second wait() throws
// InvalidArgument (from the comm op). Copies share the wait and the callback list.
#pragma once

#include <ferry/autograd/variable.h>
#include <ferry/runtime/awaitable.h>
#include <ferry/runtime/tensor.h>

#include <cstdint>
#include <optional>

namespace ferry::torchrec {

class PooledEmbeddingsAwaitable : public Awaitable<Variable> {
 public:
  // `tensor_awaitable` must be valid (InvalidArgument otherwise).
  explicit PooledEmbeddingsAwaitable(Awaitable<Variable> tensor_awaitable);
};

class SequenceEmbeddingsAwaitable : public Awaitable<Variable> {
 public:
  // With `unbucketize_permute_tensor` (int32 / int64, one entry per output row) the first
  // callback index-selects the rows with it (unbucketize_permute_callback, differentiable), so
  // that a row-wise sharded sequence lookup comes back in the order of the ids before
  // bucketization. `embedding_dim` is checked against the result's second dimension (when it
  // is > 0): torchrec views the result as [-1, embedding_dim]; ferry's alltoall_sequence
  // already returns [N, D].
  SequenceEmbeddingsAwaitable(Awaitable<Variable> tensor_awaitable,
                              std::optional<Tensor> unbucketize_permute_tensor,
                              int64_t embedding_dim);
};

}  // namespace ferry::torchrec
