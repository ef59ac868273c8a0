// torchrec's distributed communication layer, as ferry ops (spec §4). Namespace ferry::torchrec.
//
// So far: the quantized comm codecs (comm/qcomm_codec.h, comm/fbgemm_qcomm_codec.h) and their
// telemetry (comm/codec_telemetry.h). The comm ops that use them come next.
// The jagged types (sparse/): JaggedTensor, KeyedJaggedTensor, KeyedTensor, and the KJT's wire
// form for the KJT all-to-all (sparse/kjt_dist.h).
#pragma once

#include "collectives/torchrec/comm/codec_telemetry.h"
#include "collectives/torchrec/comm/fbgemm_qcomm_codec.h"
#include "collectives/torchrec/comm/qcomm_codec.h"
#include "collectives/torchrec/sparse/jagged_tensor.h"
#include "collectives/torchrec/sparse/keyed_jagged_tensor.h"
#include "collectives/torchrec/sparse/keyed_tensor.h"
#include "collectives/torchrec/sparse/kjt_dist.h"
