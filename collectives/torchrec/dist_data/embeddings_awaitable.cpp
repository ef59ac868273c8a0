#include <ferry/collectives/torchrec/dist_data/embeddings_awaitable.h>

#include <ferry/collectives/torchrec/comm/comm_ops.h>
#include <ferry/collectives/torchrec/sparse/jagged_kernels.h>
#include <ferry/runtime/error.h>

#include <utility>

namespace ferry::torchrec {

namespace {

std::function<Variable()> inner_wait(Awaitable<Variable> inner, const char* where) {
  FERRY_CHECK(inner.valid(), InvalidArgument, where, ": the tensor awaitable is empty");
  return [inner]() mutable { return inner.wait(); };
}

}  // namespace

PooledEmbeddingsAwaitable::PooledEmbeddingsAwaitable(Awaitable<Variable> tensor_awaitable)
    : Awaitable<Variable>(inner_wait(std::move(tensor_awaitable), "PooledEmbeddingsAwaitable")) {}

SequenceEmbeddingsAwaitable::SequenceEmbeddingsAwaitable(
    Awaitable<Variable> tensor_awaitable, std::optional<Tensor> unbucketize_permute_tensor,
    int64_t embedding_dim)
    : Awaitable<Variable>(inner_wait(std::move(tensor_awaitable), "SequenceEmbeddingsAwaitable")) {
  FERRY_CHECK(embedding_dim >= 0, InvalidArgument, "SequenceEmbeddingsAwaitable: embedding_dim ",
              embedding_dim, " is negative");
  if (unbucketize_permute_tensor && unbucketize_permute_tensor->defined())
    then(unbucketize_permute_callback(*unbucketize_permute_tensor));
  if (embedding_dim > 0)
    then([embedding_dim](Variable y) {
      FERRY_CHECK(y.value().dim() == 2 && y.value().size(1) == embedding_dim, InvalidArgument,
                  "SequenceEmbeddingsAwaitable: the embeddings have shape ", detail::list_str(y.value().shape()),
                  ", not [N, ", embedding_dim, "]");
      return y;
    });
}

}  // namespace ferry::torchrec
