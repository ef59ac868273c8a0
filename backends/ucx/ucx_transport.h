// The UCX transport: ferry's point-to-point over UCP tagged messages on one worker per process.
//
// Sends and receives map one to one onto ucp_tag_send_nbx / ucp_tag_recv_nbx with the tag
// layout of ucx_tag.h (source rank, group, step, sequence); sub-groups share the worker and are
// told apart by the group id. Large messages to a rank on this host are read by the receiver
// straight from the sender's buffer (ferry's CMA protocol, ucx_cma.h; FERRY_UCX_CMA=0 turns it
// off); others use UCX's protocols. Nothing is staged by ferry. A receive whose message has a
// different size fails with MismatchError (a large message's sender then fails with
// MismatchError too; another sender may succeed, and then fails with PeerFailure once the
// receiver gives up on the group). A dead peer fails every pending and
// later request with it with PeerFailure naming its rank.
//
// Threads: any thread may post, test, wait and cancel; UCP calls are serialized inside. Waiting
// polls briefly and then sleeps on the worker's event fd (see ucx_worker.h).
#pragma once

#include <ferry/backends/transport.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ferry {

// Collective over the job: given this rank's blob, returns every rank's blob, indexed by rank.
// The bootstraps (TCP rendezvous, MPI) provide one.
using BlobAllGather = std::function<std::vector<std::string>(const std::string& mine)>;

// Creates this rank's UCP context, worker and endpoints to every rank, exchanging worker
// addresses through `all_gather`. Collective: every rank of the job calls it. Throws
// TransportError when UCX fails or a peer's blob is malformed (naming that rank).
std::shared_ptr<Transport> make_ucx_transport(int rank, int size, const BlobAllGather& all_gather);

}  // namespace ferry
