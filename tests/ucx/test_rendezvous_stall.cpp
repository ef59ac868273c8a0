// The rendezvous cannot be stalled by connections that say nothing: rank 0 reads every pending
// connection at once, each under its own hello deadline, at most kMaxPending of them, so the real
// ranks join at once however many silent ones sit there. (Before, rank 0 gave each connection 5 s
// in turn: 12 silent ones used up a 30 s deadline.)
#include <ferry/backends/rendezvous/hello_server.h>
#include <ferry/backends/rendezvous/rendezvous_frame.h>
#include <ferry/backends/rendezvous/socket_io.h>
#include <ferry/backends/rendezvous/tcp_rendezvous.h>
#include <ferry/runtime/error.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

using namespace ferry;
using Catch::Matchers::Contains;

namespace {

RendezvousOptions stall_options(int rank, int size, int port) {
  RendezvousOptions o;
  o.rank = rank;
  o.size = size;
  o.port = port;
  o.secret = "stall-secret";
  o.timeout = std::chrono::seconds(30);
  return o;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

TEST_CASE("rendezvous: silent connections, more than the cap, do not hold the job up",
          "[rendezvous][stall]") {
  std::promise<int> port_promise;
  auto port_future = port_promise.get_future();
  const auto t0 = Clock::now();
  auto server = std::async(std::launch::async, [&] {
    RendezvousOptions o = stall_options(0, 3, 0);
    o.on_listening = [&](int port) { port_promise.set_value(port); };
    return tcp_rendezvous(o, "blob-0");
  });
  const int port = port_future.get();
  const size_t silent_count = detail::kMaxPending + 16;
  std::vector<detail::Socket> silent;
  const auto connect_deadline = Clock::now() + std::chrono::seconds(5);
  for (size_t i = 0; i < silent_count; ++i)
    silent.push_back(detail::connect_until("127.0.0.1", port, connect_deadline));
  // A half-sent header, then silence: read as far as it goes, never waited on.
  {
    std::string half = detail::encode_header(
        {detail::FrameType::Hello, 0, 1, 3, 12, 1});
    half.resize(10);
    detail::write_all(silent.back(), half.data(), half.size(), connect_deadline, "server");
  }
  auto r1 = std::async(std::launch::async,
                       [&] { return tcp_rendezvous(stall_options(1, 3, port), "blob-1"); });
  auto r2 = std::async(std::launch::async,
                       [&] { return tcp_rendezvous(stall_options(2, 3, port), "blob-2"); });
  const RendezvousResult a = r1.get(), b = r2.get();
  const RendezvousResult r0 = server.get();
  const double took = seconds_since(t0);
  CHECK(took < 4.0);  // far below one hello deadline (5 s), let alone the job's 30 s
  CHECK(r0.blobs == std::vector<std::string>{"blob-0", "blob-1", "blob-2"});
  CHECK(a.blobs == r0.blobs);
  CHECK(b.blobs == r0.blobs);
  // The connections past the cap evicted silent ones, each named.
  size_t evicted = 0;
  for (const std::string& why : r0.rejected)
    if (why.find("evicted") != std::string::npos) ++evicted;
  CHECK(evicted >= 16);
}

TEST_CASE("rendezvous: each connection has its own hello deadline", "[rendezvous][stall]") {
  detail::Socket listener = detail::listen_on("127.0.0.1", 0);
  const int port = detail::bound_port(listener);
  const auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::seconds(20);
  std::vector<detail::Socket> silent;
  for (int i = 0; i < 3; ++i) silent.push_back(detail::connect_until("127.0.0.1", port, deadline));
  auto late_rank = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    detail::Socket s = detail::connect_until("127.0.0.1", port, deadline);
    const std::string frame =
        detail::encode_frame(detail::FrameType::Hello, 0, 1, 2, "s3", "blob");
    detail::write_all(s, frame.data(), frame.size(), deadline, "rank 0");
    return s;
  });
  detail::HelloOutcome out = detail::collect_hellos(listener, 2, "s3", "own", deadline,
                                                    std::chrono::milliseconds(200), 8);
  detail::Socket keep = late_rank.get();
  CHECK(out.complete);
  CHECK(out.blobs[1] == "blob");
  CHECK(seconds_since(t0) < 3.0);
  REQUIRE(out.rejected.size() == 3);  // the three silent ones, each at its own 200 ms
  for (const std::string& why : out.rejected)
    CHECK_THAT(why, Contains("sent no complete hello within 200 ms"));
}

TEST_CASE("rendezvous: the job's deadline still names the missing rank amid silent connections",
          "[rendezvous][stall]") {
  detail::Socket listener = detail::listen_on("127.0.0.1", 0);
  const int port = detail::bound_port(listener);
  const auto deadline = Clock::now() + std::chrono::milliseconds(700);
  std::vector<detail::Socket> silent;
  for (int i = 0; i < 4; ++i) silent.push_back(detail::connect_until("127.0.0.1", port, deadline));
  const auto t0 = Clock::now();
  detail::HelloOutcome out = detail::collect_hellos(listener, 2, "s", "own", deadline);
  CHECK_FALSE(out.complete);
  CHECK_FALSE(out.conns[1].valid());
  CHECK(seconds_since(t0) < 1.5);
}
