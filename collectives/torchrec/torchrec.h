// torchrec's distributed communication layer, as ferry ops (spec §4). Namespace ferry::torchrec.
//
// So far: the quantized comm codecs (comm/qcomm_codec.h, comm/fbgemm_qcomm_codec.h) and their
// telemetry (comm/codec_telemetry.h). The comm ops that use them come next.
#pragma once

#include "collectives/torchrec/comm/codec_telemetry.h"
#include "collectives/torchrec/comm/collective_utils.h"
#include "collectives/torchrec/comm/fbgemm_qcomm_codec.h"
#include "collectives/torchrec/comm/qcomm_codec.h"
#include "collectives/torchrec/comm/topology.h"
