// A peer's last message reaches its receiver even when the receiver sees the peer's process end
// before it can read the message.
//
// UCX's shared-memory transport gives each process one receive ring for all its senders, read
// in the order the senders reserved their slots. A sender that reserved a slot and is
// descheduled before it finished writing hides every later message, a dead sender's among
// them, until it runs again. Here rank 1 plays that sender on purpose: it sends to rank 0 with
// a UCX generic datatype whose pack callback (UCX calls it between reserving the slot and
// marking it written) tells rank 2 to go and then sleeps. Rank 2 sends rank 0 its message and
// ends at once. Rank 0's pidfd watch sees rank 2 end while the message is still hidden behind
// rank 1's slot.
//
// Rank 0 must still receive the message, intact; a receive for a message rank 2 never sent
// fails with PeerFailure naming rank 2, within a second or two; a send to rank 2 fails at once.
// The data goes through a UCX world of its own (make_ucx_transport, addresses exchanged over
// the job's world), whose worker address rank 1 needs for its raw UCP endpoint.
#include "tests/ucx/child_scenarios.h"

#include <ferry/backends/ucx/ucx_peer_blob.h>
#include <ferry/backends/ucx/ucx_transport.h>
#include <ferry/ferry.h>
#include "tests/catch/caught_error.h"

#include <ucp/api/ucp.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace ucxtest {
namespace {

using namespace ferry;
using Clock = std::chrono::steady_clock;

// How long rank 1 holds its slot in rank 0's ring: well below the time the receives from a
// dead peer wait for its last messages (half a second), well above a message's latency.
constexpr auto kHold = std::chrono::milliseconds(150);
constexpr int kMessageBytes = 1024;  // one eager message over shared memory
constexpr int kGoTag = 31;           // rank 1 -> rank 2 on the job's world: "send now"

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Every rank's `mine`, through the job's world (one float per byte, lengths first).
std::vector<std::string> all_gather_strings(const Group& world, const std::string& mine) {
  const int n = world.size();
  Tensor lengths = zeros({n});
  Tensor length = full({1}, static_cast<double>(mine.size()));
  all_gather(length, lengths, world).wait();
  size_t longest = 0;
  for (int r = 0; r < n; ++r) longest = std::max(longest, static_cast<size_t>(lengths.get_flat(r)));
  Tensor bytes = zeros({static_cast<int64_t>(longest)});
  for (size_t i = 0; i < mine.size(); ++i)
    bytes.set_flat(static_cast<int64_t>(i), static_cast<unsigned char>(mine[i]));
  Tensor all = zeros({static_cast<int64_t>(longest) * n});
  all_gather(bytes, all, world).wait();
  std::vector<std::string> out(n);
  for (int r = 0; r < n; ++r) {
    const auto len = static_cast<size_t>(lengths.get_flat(r));
    for (size_t i = 0; i < len; ++i)
      out[r].push_back(static_cast<char>(static_cast<int>(all.get_flat(int64_t(r * longest + i)))));
  }
  return out;
}

// Rank 1's slow write: the pack callback of a generic datatype.
struct SlowPack {
  const Group* world;
  bool told = false;
};
void* start_pack(void* context, const void*, size_t) { return context; }
void* start_unpack(void* context, void*, size_t) { return context; }
size_t packed_size(void*) { return 64; }
size_t pack(void* state, size_t offset, void* dest, size_t max_length) {
  auto* p = static_cast<SlowPack*>(state);
  if (!p->told) {
    p->told = true;
    send(full({1}, 1.0), 2, *p->world, kGoTag).wait();  // rank 2 reserves the next slot
    std::this_thread::sleep_for(kHold);
  }
  const size_t n = std::min<size_t>(64 - offset, max_length);
  std::memset(dest, 0x5a, n);
  return n;
}
ucs_status_t unpack(void*, size_t, const void*, size_t) { return UCS_OK; }
void finish(void*) {}

// Rank 1: a raw UCP worker of its own sends one message to rank 0's worker (a tag nobody
// receives: it is dropped when rank 0's world ends), writing it slowly.
bool hold_the_ring(const Group& world, const std::string& rank0_address) {
  ucp_config_t* config = nullptr;
  if (ucp_config_read(nullptr, nullptr, &config) != UCS_OK) return false;
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG;
  ucp_context_h context = nullptr;
  const ucs_status_t s = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (s != UCS_OK) return false;
  ucp_worker_params_t wparams{};
  ucp_worker_h worker = nullptr;
  if (ucp_worker_create(context, &wparams, &worker) != UCS_OK) return false;
  ucp_ep_params_t ep_params{};
  ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
  ep_params.address = reinterpret_cast<const ucp_address_t*>(rank0_address.data());
  ucp_ep_h ep = nullptr;
  if (ucp_ep_create(worker, &ep_params, &ep) != UCS_OK) return false;
  ucp_generic_dt_ops_t ops{start_pack, start_unpack, packed_size, pack, unpack, finish};
  ucp_datatype_t dt;
  SlowPack state{&world};
  if (ucp_dt_create_generic(&ops, &state, &dt) != UCS_OK) return false;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
  param.datatype = dt;
  void* r = ucp_tag_send_nbx(ep, nullptr, 1, ~uint64_t{0}, &param);
  if (UCS_PTR_IS_PTR(r)) {
    while (ucp_request_check_status(r) == UCS_INPROGRESS) ucp_worker_progress(worker);
    ucp_request_free(r);
  }
  const bool sent = !UCS_PTR_IS_ERR(r) && state.told;
  // The endpoint, worker and context are left to the process's end: a flush would wait on
  // rank 0, and rank 0 ends without one.
  return sent;
}

}  // namespace

int last_message() {
  Group world = init();
  const int me = world.rank();
  int made = 0, failed = 0;
  auto expect = [&](bool ok, const std::string& what) {
    ++made;
    if (ok) return;
    ++failed;
    std::fprintf(stderr, "[rank %d] CHECK FAILED: %s\n", me, what.c_str());
  };
  if (world.size() != 3) {
    std::fprintf(stderr, "last-message runs on 3 ranks, given %d\n", world.size());
    return 1;
  }
  std::vector<std::string> blobs;
  std::shared_ptr<Transport> t = make_ucx_transport(me, 3, [&](const std::string& mine) {
    blobs = all_gather_strings(world, mine);
    return blobs;
  });
  const Tag last{7, 1, 1, 0}, never{7, 2, 1, 0};
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  std::vector<unsigned char> got(kMessageBytes, 0), nothing(8, 0);
  std::vector<unsigned char> message(kMessageBytes);
  for (int i = 0; i < kMessageBytes; ++i) message[i] = static_cast<unsigned char>(i * 7 + 3);
  std::unique_ptr<Request> recv_last, recv_never;
  if (me == 0) {
    recv_last = t->irecv(2, last, got.data(), got.size());
    recv_never = t->irecv(2, never, nothing.data(), nothing.size());
  }
  barrier(world).wait();  // rank 0's receives are posted
  if (me == 1) {
    expect(hold_the_ring(world, detail::decode_ucx_peer_blob(blobs[0], 1, 0).address),
           "the slow message to rank 0 was sent, and its pack callback ran");
  } else if (me == 2) {
    recv(empty({1}), 1, world, kGoTag).wait();
    std::unique_ptr<Request> s = t->isend(0, last, message.data(), message.size());
    expect(s->wait_until(deadline), "the last message left in time");
    s->rethrow_if_failed();
    std::fflush(stderr);
    _exit(failed == 0 ? 0 : 1);  // at once: rank 0 sees the process end
  } else {
    const auto t0 = Clock::now();
    test::Caught e = test::capture([&] {
      if (!recv_last->wait_until(deadline)) throw std::runtime_error("no message by the deadline");
      recv_last->rethrow_if_failed();
    });
    const double took = seconds_since(t0);
    std::fprintf(stderr, "[rank 0] the last message of rank 2: %s after %.3f s\n",
                 e.kind.empty() ? "received" : (e.kind + ": " + e.what).c_str(), took);
    expect(e.kind.empty(), "rank 2's last message arrives though rank 2 ended: " + e.what);
    expect(got == message, "rank 2's last message arrives intact");
    // The premise: the message was hidden until rank 1 wrote its slot (else this tested
    // nothing; UCX would have to carry the two senders' messages apart).
    expect(took >= 0.8 * std::chrono::duration<double>(kHold).count(),
           "the message was hidden behind rank 1's slot for a while, took " +
               std::to_string(took) + " s");
    test::Caught never_came = test::capture([&] {
      if (!recv_never->wait_until(deadline))
        throw std::runtime_error("still pending at the deadline");
      recv_never->rethrow_if_failed();
    });
    const double total = seconds_since(t0);
    expect(never_came.kind == "PeerFailure" &&
               never_came.what.find("rank 2") != std::string::npos,
           "a message rank 2 never sent fails with PeerFailure naming it, got " +
               never_came.kind + ": " + never_came.what);
    expect(total < 3.0, "and within seconds of rank 2's end, took " + std::to_string(total));
    const auto t1 = Clock::now();
    test::Caught send_fails = test::capture([&] {
      std::unique_ptr<Request> s = t->isend(2, never, message.data(), 8);
      if (!s->wait_until(deadline)) throw std::runtime_error("still pending at the deadline");
      s->rethrow_if_failed();
    });
    expect(send_fails.kind == "PeerFailure" && seconds_since(t1) < 0.5,
           "a send to rank 2 fails at once with PeerFailure, got " + send_fails.kind);
  }
  std::fflush(stderr);
  // No finalize: rank 2 is gone, and the world's end would wait on it.
  _exit(made > 0 && failed == 0 ? 0 : 1);
}

}  // namespace ucxtest
