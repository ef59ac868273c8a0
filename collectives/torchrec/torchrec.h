// torchrec's distributed communication layer as ferry ops. Namespace ferry::torchrec; this is the
// family's one public header.
//
//   comm/comm_ops.h          torchrec.distributed.comm_ops: alltoall_pooled,
//                            variable_batch_alltoall_pooled, alltoall_sequence, alltoallv,
//                            reduce_scatter_pooled, reduce_scatter_base_pooled,
//                            reduce_scatter_v_pooled, reduce_scatter_v_per_feature_pooled,
//                            all_gather_base_pooled and their info structs. Each op launches
//                            its collective and returns an Awaitable of the output Variable(s)
//                            (torchrec's Req/Wait split on ferry's tape), differentiable, with
//                            torchrec's gradient division and codecs.
//   comm/comm_switches.h     set/get_gradient_division, set/get_use_sync_collectives,
//                            UseSyncCollectivesScope (torchrec_use_sync_collectives()),
//                            comm_op_gradient_scaling (CommOpGradientScaling).
//   comm/lazy_awaitable.h    LazyAwaitable, LazyNoWait, GetItemLazyAwaitable (types.py); the
//                            Awaitable / NoWait they build on are ferry's (runtime/awaitable.h).
//   comm/qcomm_codec.h       the codec protocol, NoOpQuantizedCommCodec, QuantizedCommCodecs,
//   comm/fbgemm_qcomm_codec.h  CommOp; the FBGEMM codecs, QCommsConfig, the codec registry;
//   comm/codec_telemetry.h   per-codec round-trip error (a ferry addition).
//   comm/collective_utils.h  is_leader, invoke_on_rank_and_broadcast_result, run_on_leader
//                            (results carried by utils/serialization.h).
//   utils/                   what every other folder may use, below all of them:
//     topology.h             comm.py: get_local_size / rank, group rank, intra- and cross-node
//                            groups; serialization.h: the byte form of broadcast results.
//   sparse/                  the jagged types (JaggedTensor, KeyedJaggedTensor, KeyedTensor),
//                            the KJT's wire form (kjt_dist.h) and row-wise bucketization and the
//                            pooled-embedding column permutation (bucketize.h).
//   dist_data/               torchrec's dist_data.py, one module per file:
//     kjt_all_to_all.h       KJTAllToAll and its two awaitables: the input dist.
//     embeddings_awaitable.h PooledEmbeddingsAwaitable, SequenceEmbeddingsAwaitable.
//     pooled_embeddings_all_to_all.h    PooledEmbeddingsAllToAll,
//                            VariableBatchPooledEmbeddingsAllToAll,
//                            permute_pooled_embs_callback (column-wise).
//     sequence_embeddings_all_to_all.h  SequenceEmbeddingsAllToAll (+ the per-sample recat).
//     pooled_embeddings_reduce_scatter.h  PooledEmbeddingsReduceScatter,
//                            VariableBatchPooledEmbeddingsReduceScatter,
//                            PooledEmbeddingsAllGather.
//     inference_dists.h      KJTOneToAll, EmbeddingsAllToOne, EmbeddingsAllToOneReduce,
//                            SeqEmbeddingsAllToOne (single process; "devices" = local ranks).
//   modules/                 the unsharded embedding modules (EmbeddingBagCollection,
//                            EmbeddingCollection), their configs, tables, lookups (also the
//                            sharded modules' local kernels), sparse row gradients and fused
//                            sparse optimizers.
//   planner/                 the plan types (types.h), plans written by hand (sharding_plan.h),
//                            the agreement of a plan across ranks (plan_agreement.h),
//                            the planner's cost model (cost_model.h), the bandwidths it prices
//                            bytes at, from the job (host_bandwidth.h), the planner (planner.h)
//                            and the plan printer (plan_printer.h).
//   train_pipeline/          TrainPipelineBase, TrainPipelineSparseDist (exhaustion agreed).
//   model_parallel/          DistributedModelParallel: shards a ShardableModel's collections by
//                            a plan (shard_model.h) or wraps sharded modules (ShardedModule,
//                            ShardedEbcModule); the dense part through a GradientReducer.
//   models/dlrm.h            DLRM (DenseArch, InteractionArch, OverArch in dlrm_arches.h, Mlp /
//                            Linear in mlp.h) with a pluggable SparseArch; bce_with_logits.
//   datasets/                Batch and the sharded batch schedule (batch.h), the synthetic
//                            Criteo-like generator (synthetic_criteo.h), the Criteo TSV reader,
//                            the loader thread (prefetching_source.h), the in-memory cache of a
//                            split (caching_source.h).
//   metrics/                 exact AUC with ties counted half (auc.h), accuracy, log loss, all
//                            over a Group (binary_metrics.h).
//   sharding/                ShardedEmbeddingBagCollection, ShardedEmbeddingCollection (input
//                            dist -> lookup -> output dist per sharding type: dp_sharding.h,
//                            twcw_sharding.h over tw_sharding.h and cw_sharding.h,
//                            rw_sharding.h, twrw_sharding.h) over what both share
//                            (sharded_collection_base.h): the shards (sharded_tables.h), the
//                            options, the input check, the state dicts, the data_parallel
//                            tables.
//
// Names are the original's (snake_case functions, CamelCase types), so ported code reads the
// same; docs/torchrec/file-map.md maps torchrec's files to these, and docs/torchrec/*.md list
// the names and the deliberate differences.
#pragma once

#include <ferry/collectives/torchrec/comm/codec_telemetry.h>
#include <ferry/collectives/torchrec/comm/collective_utils.h>
#include <ferry/collectives/torchrec/comm/comm_ops.h>
#include <ferry/collectives/torchrec/comm/comm_switches.h>
#include <ferry/collectives/torchrec/comm/fbgemm_qcomm_codec.h>
#include <ferry/collectives/torchrec/comm/lazy_awaitable.h>
#include <ferry/collectives/torchrec/comm/qcomm_codec.h>
#include <ferry/collectives/torchrec/datasets/caching_source.h>
#include <ferry/collectives/torchrec/datasets/criteo_tsv.h>
#include <ferry/collectives/torchrec/datasets/prefetching_source.h>
#include <ferry/collectives/torchrec/datasets/synthetic_criteo.h>
#include <ferry/collectives/torchrec/dist_data/embeddings_awaitable.h>
#include <ferry/collectives/torchrec/dist_data/inference_dists.h>
#include <ferry/collectives/torchrec/dist_data/kjt_all_to_all.h>
#include <ferry/collectives/torchrec/dist_data/pooled_embeddings_all_to_all.h>
#include <ferry/collectives/torchrec/dist_data/pooled_embeddings_reduce_scatter.h>
#include <ferry/collectives/torchrec/dist_data/sequence_embeddings_all_to_all.h>
#include <ferry/collectives/torchrec/metrics/auc.h>
#include <ferry/collectives/torchrec/metrics/binary_metrics.h>
#include <ferry/collectives/torchrec/model_parallel/model_parallel.h>
#include <ferry/collectives/torchrec/model_parallel/sharded_collection_module.h>
#include <ferry/collectives/torchrec/model_parallel/sharded_embedding_module.h>
#include <ferry/collectives/torchrec/models/dlrm.h>
#include <ferry/collectives/torchrec/models/dot_interaction.h>
#include <ferry/collectives/torchrec/modules/embedding_bag_collection.h>
#include <ferry/collectives/torchrec/modules/embedding_collection.h>
#include <ferry/collectives/torchrec/modules/embedding_config.h>
#include <ferry/collectives/torchrec/modules/embedding_lookup.h>
#include <ferry/collectives/torchrec/modules/embedding_table.h>
#include <ferry/collectives/torchrec/modules/fused_optimizer.h>
#include <ferry/collectives/torchrec/modules/sparse_row_gradient.h>
#include <ferry/collectives/torchrec/planner/cost_model.h>
#include <ferry/collectives/torchrec/planner/host_bandwidth.h>
#include <ferry/collectives/torchrec/planner/plan_agreement.h>
#include <ferry/collectives/torchrec/planner/plan_printer.h>
#include <ferry/collectives/torchrec/planner/planner.h>
#include <ferry/collectives/torchrec/planner/sharding_plan.h>
#include <ferry/collectives/torchrec/planner/types.h>
#include <ferry/collectives/torchrec/sharding/dp_sharding.h>
#include <ferry/collectives/torchrec/sharding/embedding_sharding.h>
#include <ferry/collectives/torchrec/sharding/rw_sharding.h>
#include <ferry/collectives/torchrec/sharding/sharded_embedding_bag_collection.h>
#include <ferry/collectives/torchrec/sharding/sharded_embedding_collection.h>
#include <ferry/collectives/torchrec/sharding/sharded_collection_base.h>
#include <ferry/collectives/torchrec/sharding/twcw_sharding.h>
#include <ferry/collectives/torchrec/sharding/twrw_sharding.h>
#include <ferry/collectives/torchrec/sparse/bucketize.h>
#include <ferry/collectives/torchrec/sparse/jagged_tensor.h>
#include <ferry/collectives/torchrec/sparse/keyed_jagged_tensor.h>
#include <ferry/collectives/torchrec/sparse/keyed_tensor.h>
#include <ferry/collectives/torchrec/sparse/kjt_dist.h>
#include <ferry/collectives/torchrec/train_pipeline/train_pipeline.h>
#include <ferry/collectives/torchrec/utils/topology.h>
