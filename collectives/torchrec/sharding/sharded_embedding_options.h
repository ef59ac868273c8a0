// ferry::torchrec::ShardedEmbeddingOptions: the environment of a sharded collection (torchrec's
// ShardingEnv and the sharder's options), shared by ShardedEmbeddingBagCollection and
// ShardedEmbeddingCollection.
#pragma once

#include <ferry/collectives/torchrec/comm/fbgemm_qcomm_codec.h>
#include <ferry/collectives/torchrec/modules/embedding_table.h>

#include <optional>

namespace ferry::torchrec {

struct ShardedEmbeddingOptions {
  // Ranks per node for table_row_wise / table_column_wise (0: get_local_size(world)). Must
  // divide the world size. Used for plan validation and the intra/cross-node groups.
  int local_size = 0;
  // Before any payload moves, every rank checks its own KJT (configured features present, ids in
  // [0, num_embeddings), weights present when weighted) and the ranks exchange the outcome (5
  // int64 per rank: input_dist's own all_gather, or, in the train pipelines, the agreement on
  // the next batch that they issue anyway), so a bad batch raises the same InvalidArgument,
  // naming the rank, table, feature, sample and id, on EVERY rank and the group stays usable.
  // Off: the owning rank's lookup raises (BoundsCheckMode::Fatal) and its peers see the failure
  // as a peer failure / timeout. sharded_input_check.h.
  bool check_inputs = true;
  // Codecs of the embedding output dists (comm ops) from a QCommsConfig (std::nullopt: none).
  std::optional<QCommsConfig> qcomms_config{};
  // Per-table bounds handling of the lookups (fbgemm's modes; see embedding_table.h).
  BoundsCheckMode bounds_check_mode = BoundsCheckMode::Fatal;
};

}  // namespace ferry::torchrec
