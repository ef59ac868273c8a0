// torchrec's distributed communication layer, as ferry ops (spec §4). Namespace ferry::torchrec.
//
// So far:
//  - comm/: the quantized comm codecs (qcomm_codec.h, fbgemm_qcomm_codec.h) and their telemetry
//    (codec_telemetry.h); the process-group topology (topology.h) and collective utils
//    (collective_utils.h, results carried by serialization.h).
//  - sparse/: the jagged types (JaggedTensor, KeyedJaggedTensor, KeyedTensor) and the KJT's wire
//    form for the KJT all-to-all (kjt_dist.h).
//  - modules/: the unsharded embedding modules (EmbeddingBagCollection, EmbeddingCollection),
//    their configs, tables, lookups (also the sharded modules' local kernels), sparse row
//    gradients and fused sparse optimizers.
#pragma once

#include "collectives/torchrec/comm/codec_telemetry.h"
#include "collectives/torchrec/comm/collective_utils.h"
#include "collectives/torchrec/comm/fbgemm_qcomm_codec.h"
#include "collectives/torchrec/comm/qcomm_codec.h"
#include "collectives/torchrec/comm/topology.h"
#include "collectives/torchrec/modules/embedding_bag_collection.h"
#include "collectives/torchrec/modules/embedding_collection.h"
#include "collectives/torchrec/modules/embedding_config.h"
#include "collectives/torchrec/modules/embedding_lookup.h"
#include "collectives/torchrec/modules/embedding_table.h"
#include "collectives/torchrec/modules/fused_optimizer.h"
#include "collectives/torchrec/modules/sparse_row_gradient.h"
#include "collectives/torchrec/sparse/jagged_tensor.h"
#include "collectives/torchrec/sparse/keyed_jagged_tensor.h"
#include "collectives/torchrec/sparse/keyed_tensor.h"
#include "collectives/torchrec/sparse/kjt_dist.h"
