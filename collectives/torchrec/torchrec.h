// torchrec's distributed communication layer, as ferry ops (spec §4). Namespace ferry::torchrec.
//
// So far:
//  - comm/: the quantized comm codecs (qcomm_codec.h, fbgemm_qcomm_codec.h) and their telemetry
//    (codec_telemetry.h); the process-group topology (topology.h) and collective utils
//    (collective_utils.h, results carried by serialization.h).
//  - sparse/: the jagged types (JaggedTensor, KeyedJaggedTensor, KeyedTensor) and the KJT's wire
//    form for the KJT all-to-all (kjt_dist.h).
//  - planner/: sharding plans (sharding_plan.h, plan_helpers.h, plan_agreement.h), the planner's
//    cost model (cost_model.h), the planner (planner.h) and the plan printer (plan_printer.h).
#pragma once

#include "collectives/torchrec/comm/codec_telemetry.h"
#include "collectives/torchrec/comm/collective_utils.h"
#include "collectives/torchrec/comm/fbgemm_qcomm_codec.h"
#include "collectives/torchrec/comm/qcomm_codec.h"
#include "collectives/torchrec/comm/topology.h"
#include "collectives/torchrec/planner/cost_model.h"
#include "collectives/torchrec/planner/plan_agreement.h"
#include "collectives/torchrec/planner/plan_helpers.h"
#include "collectives/torchrec/planner/plan_printer.h"
#include "collectives/torchrec/planner/planner.h"
#include "collectives/torchrec/planner/sharding_plan.h"
#include "collectives/torchrec/sparse/jagged_tensor.h"
#include "collectives/torchrec/sparse/keyed_jagged_tensor.h"
#include "collectives/torchrec/sparse/keyed_tensor.h"
#include "collectives/torchrec/sparse/kjt_dist.h"
