// Rank 0's rendezvous names each rejected connection on stderr, but only the first
// kMaxRejectLines: a flood of connections (a port scanner, a job started twice) must not bury
// the job's own messages. The rest are counted in one line; every reason stays in the outcome.
#include <ferry/backends/rendezvous/hello_server.h>
#include <ferry/backends/rendezvous/rendezvous_frame.h>
#include <ferry/backends/rendezvous/socket_io.h>
#include <ferry/runtime/error.h>

#include "stderr_capture.h"

#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <sstream>
#include <string>
#include <vector>

using namespace ferry;
using Catch::Matchers::Contains;
using ferry::test::count_containing;
using ferry::test::lines_of;
using ferry::test::StderrCapture;

namespace {

// One connection that sends a header with a bad magic and waits (under the deadline) until rank 0
// closes it: its rejection is then in the outcome before the next connection is made.
void send_garbage(int port, Clock::time_point deadline) {
  detail::Socket s = detail::connect_until("127.0.0.1", port, deadline);
  const std::string bytes(detail::kFrameHeaderBytes, 'x');
  detail::write_all(s, bytes.data(), bytes.size(), deadline, "rank 0");
  ::shutdown(s.fd(), SHUT_WR);
  char c = 0;
  try {
    for (;;) detail::read_exact(s, &c, 1, deadline, "rank 0");  // the Reject frame, then EOF
  } catch (const Error&) {
    // Closed: rejected.
  }
}

// `garbage` rejected connections one after the other, then (when `then_rank_1`) rank 1's hello.
detail::Socket client(int port, int garbage, bool then_rank_1, Clock::time_point deadline) {
  for (int i = 0; i < garbage; ++i) send_garbage(port, deadline);
  if (!then_rank_1) return detail::Socket();
  detail::Socket s = detail::connect_until("127.0.0.1", port, deadline);
  const std::string frame =
      detail::encode_frame(detail::FrameType::Hello, 0, 1, 2, "reject-secret", "blob");
  detail::write_all(s, frame.data(), frame.size(), deadline, "rank 0");
  return s;
}

struct Run {
  detail::HelloOutcome out;
  std::vector<std::string> lines;  // what rank 0 printed
};

Run collect(int garbage, bool then_rank_1, std::chrono::milliseconds deadline_in) {
  detail::Socket listener = detail::listen_on("127.0.0.1", 0);
  const int port = detail::bound_port(listener);
  const auto deadline = Clock::now() + deadline_in;
  auto peer = std::async(std::launch::async,
                         [&] { return client(port, garbage, then_rank_1, deadline); });
  Run run;
  {
    StderrCapture capture;
    run.out = detail::collect_hellos(listener, 2, "reject-secret", "own", deadline);
    run.lines = lines_of(capture.text());
  }
  detail::Socket keep = peer.get();  // rank 1's connection stays open until rank 0 returned
  return run;
}

}  // namespace

TEST_CASE("rendezvous: a flood of rejected connections prints the first ones and a count",
          "[rendezvous][rejects]") {
  const int garbage = static_cast<int>(detail::kMaxRejectLines) + 15;
  const Run run = collect(garbage, true, std::chrono::seconds(20));
  CHECK(run.out.complete);
  CHECK(run.out.blobs[1] == "blob");
  // Every reason is kept, whatever was printed.
  REQUIRE(run.out.rejected.size() == static_cast<size_t>(garbage));
  for (const std::string& why : run.out.rejected) CHECK_THAT(why, Contains("bad magic"));
  INFO("stderr:\n" << [&] {
    std::string all;
    for (const std::string& l : run.lines) all += l + "\n";
    return all;
  }());
  CHECK(run.lines.size() == detail::kMaxRejectLines + 1);
  CHECK(count_containing(run.lines, "rejected a connection from the peer at 127.0.0.1:") ==
        detail::kMaxRejectLines);
  REQUIRE_FALSE(run.lines.empty());
  CHECK_THAT(run.lines.back(), Contains("... and 15 more rejected connections"));
}

TEST_CASE("rendezvous: a few rejected connections are each printed, with no count",
          "[rendezvous][rejects]") {
  const Run run = collect(3, true, std::chrono::seconds(20));
  CHECK(run.out.complete);
  CHECK(run.out.rejected.size() == 3);
  CHECK(run.lines.size() == 3);
  CHECK(count_containing(run.lines, "rejected a connection from") == 3);
  CHECK(count_containing(run.lines, "more rejected") == 0);
}

TEST_CASE("rendezvous: the count of unprinted rejections is printed when the deadline ends it",
          "[rendezvous][rejects]") {
  // No rank 1: rank 0 returns at its deadline, well after the client's last connection.
  const int garbage = static_cast<int>(detail::kMaxRejectLines) + 1;
  const Run run = collect(garbage, false, std::chrono::seconds(4));
  CHECK_FALSE(run.out.complete);
  CHECK(run.out.rejected.size() == static_cast<size_t>(garbage));
  CHECK(run.lines.size() == detail::kMaxRejectLines + 1);
  REQUIRE_FALSE(run.lines.empty());
  CHECK_THAT(run.lines.back(), Contains("... and 1 more rejected connection ("));
}
