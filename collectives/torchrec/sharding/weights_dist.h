// The per-sample weights' way back through a sharded collection's input dist: a ferry addition.
//
// torchrec's KJTAllToAll runs under no_grad with a non-differentiable all_to_all_single, so the
// weights a weighted ShardedEmbeddingBagCollection looks up with are constants on the owning
// rank: a caller whose KJT weights require grad gets no gradient for them from the table-wise,
// column-wise, row-wise and table-row-wise groups (only data_parallel, which looks up the
// caller's own tensor, gives one). ferry's principle is "no silent wrong gradient", so the
// sharded collections take the weights as a Variable (forward(kjt, per_sample_weights), as the
// unsharded EmbeddingBagCollection does) and route their gradient back to the caller:
//
//   caller weights w (rank r, KJT order)
//     -> the sharding's local rearrangement (feature selection / column-shard repeats /
//        bucketization / node permutation): sent[j] = w[send_index[j]]
//     -> KJTAllToAll (values and weights move together, recat on receipt)
//     -> received weights on the owner -> CommOpGradientScaling (x W with gradient division,
//        torchrec's rule for weights) -> the lookup
//
// The backward of the middle step (this file's Function) inverts the recat, sends every
// received value's gradient back to its source rank (one all_to_all_single, splits swapped) and
// scatter-adds it into the caller's positions (a weight that several column shards use gets the
// sum). With gradient division on, the owner's upstream gradient is already divided by W and the
// scaling multiplies by W: the caller receives d L_r / d w for its own loss L_r, exactly what the
// unsharded EmbeddingBagCollection gives on the rank's own batch (and what data_parallel gives).
//
// Collective in backward: every rank of the group runs it, in tape order, when the weights
// require grad on every rank (the collections check the agreement with their input check).
// Works with a uniform or a variable stride per key (VBE).
#pragma once

#include <ferry/autograd/variable.h>
#include <ferry/collectives/group.h>
#include <ferry/collectives/torchrec/dist_data/kjt_all_to_all.h>
#include <ferry/collectives/torchrec/sparse/keyed_jagged_tensor.h>

#include <functional>

namespace ferry::torchrec::detail {

// The caller position of every value of rearrange(kjt), for a rearrangement that moves weights
// with their values (select_features, permute, bucketize): run on a copy of kjt whose weights
// are the positions 0..n-1 (float64, exact below 2^53). int64 [values of the result].
Tensor value_sources(const KeyedJaggedTensor& kjt,
                     const std::function<KeyedJaggedTensor(const KeyedJaggedTensor&)>& rearrange);

// The received weights as a Variable whose gradient flows to `caller_weights`: forward returns
// received.weights() (no communication); backward as described above. `send_index`: the
// value_sources of the KJT this rank sent; `exchange`: the input dist's phase 2 (its splits,
// stagger and the sources' strides); `received`: what it delivered.
Variable dist_weights(const Variable& caller_weights, const Tensor& send_index,
                      const KJTAllToAllTensorsAwaitable& exchange,
                      const KeyedJaggedTensor& received, const Group& group);

}  // namespace ferry::torchrec::detail
