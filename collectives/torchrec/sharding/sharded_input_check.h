// The collective input check of a sharded collection (ShardedEmbeddingOptions::check_inputs):
// before any payload moves, every rank checks its own KJT and the ranks exchange the outcome,
// so that a bad batch raises the same InvalidArgument on every rank and the group stays usable.
//
// It has two halves so that a caller which exchanges something with every rank before each
// batch anyway (the train pipelines' agreement on the next batch) can carry the words on it:
// input_status (this rank's words, local) and raise_input_status (the verdict over every rank's
// words, in rank order). check_input is both with an all_gather between them.
#pragma once

#include <ferry/autograd/variable.h>
#include <ferry/collectives/torchrec/sharding/sharded_tables.h>
#include <ferry/collectives/torchrec/sparse/keyed_jagged_tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ferry::torchrec::detail {

// One rank's half of the check: the words every rank's verdict needs (kWords of them: {problem,
// feature, sample, id, weights require grad}) and the text of an error only this rank can
// describe in full.
struct InputCheckStatus {
  static constexpr int kWords = 5;
  std::vector<int64_t> words;
  std::string vbe_error;
};

// Throws InvalidArgument on every rank when any rank's KJT is bad (a configured feature missing,
// an id out of range, weights missing from a weighted collection's KJT), or its `weights` (the
// caller's per-sample weights Variable, if given) do not match the KJT's weights (dtype, one per
// value; only a weighted collection takes them), or the ranks disagree on whether the weights
// require grad (their gradient goes back through a collective: all ranks or none).
// allow_vbe: a variable stride per key is accepted (pooled collections, every sharding type);
// it then needs valid inverse_indices. Otherwise VBE is refused. Collective over
// tables.world() when options.check_inputs (W = 1: local only); local facts about `weights`
// only, raised on this rank, when it is off.
void check_input(const ShardedTables& tables, const KeyedJaggedTensor& kjt, bool weighted,
                 const char* where, const Variable& weights = Variable(), bool allow_vbe = false);
// This rank's words (local).
InputCheckStatus input_status(const ShardedTables& tables, const KeyedJaggedTensor& kjt,
                              bool weighted, const Variable& weights, bool allow_vbe,
                              const char* where);
// The verdict over every rank's words in rank order: the same InvalidArgument on every rank.
void raise_input_status(const ShardedTables& tables, const std::vector<int64_t>& all,
                        const InputCheckStatus& mine, const char* where);

}  // namespace ferry::torchrec::detail
