// Rank 0's store server names each refused connection on stderr, but only the first
// kMaxRejectLines: it serves for the whole job, so a flood of bad connections (a port scanner,
// another job's clients with their own secret) would otherwise bury the job's own messages. One
// line says so as soon as the cap is passed (while the server runs), and the rest are counted
// in one line when the server stops; the job's clients are served throughout.
#include <ferry/backends/rendezvous/hello_server.h>
#include <ferry/backends/rendezvous/socket_io.h>
#include <ferry/backends/rendezvous/store_protocol.h>
#include <ferry/backends/rendezvous/store_server.h>
#include <ferry/runtime/error.h>

#include "stderr_capture.h"

#include <catch2/catch.hpp>

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

using namespace ferry;
using Catch::Matchers::Contains;
using ferry::test::count_containing;
using ferry::test::lines_of;
using ferry::test::StderrCapture;

namespace {

const std::string kSecret = "store-secret";

// One connection with the wrong secret, read until the server closes it: its refusal is printed
// (or counted) before the next connection is made, so the lines come in order.
void send_wrong_secret(int port, Clock::time_point deadline) {
  detail::Socket s = detail::connect_until("127.0.0.1", port, deadline);
  const std::string hello = detail::encode_store_hello(1, "not-the-secret");
  detail::write_all(s, hello.data(), hello.size(), deadline, "the store server");
  char c = 0;
  try {
    for (;;) detail::read_exact(s, &c, 1, deadline, "the store server");  // the error, then EOF
  } catch (const Error&) {
    // Closed: refused.
  }
}

// A client with the job's secret: its hello is answered Ok.
bool hello_accepted(int port, Clock::time_point deadline) {
  detail::Socket s = detail::connect_until("127.0.0.1", port, deadline);
  const std::string hello = detail::encode_store_hello(1, kSecret);
  detail::write_all(s, hello.data(), hello.size(), deadline, "the store server");
  unsigned char answer[5] = {};
  detail::read_exact(s, answer, sizeof answer, deadline, "the store server");
  return detail::decode_u32(answer) == 1 &&
         answer[4] == static_cast<unsigned char>(detail::StoreStatus::Ok);
}

constexpr const char* kCapRefused =
    "ferry: store server: more than 10 refused connections; the rest are counted, not shown "
    "(a count every 60 s while they go on, and when the server stops)";
constexpr const char* kCapSilent =
    "ferry: store server: more than 10 silent connections closed; the rest are counted, not "
    "shown";

struct Run {
  std::vector<std::string> lines;  // what the server printed, up to and including its stop
  std::vector<std::string> running;  // what it printed before it was told to stop
  bool served_after = false;       // a good client's hello was answered after the refusals
};

Run refuse(int wrong) {
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  Run run;
  StderrCapture capture;
  {
    auto server = std::make_unique<detail::StoreServer>("127.0.0.1", 0, kSecret);
    for (int i = 0; i < wrong; ++i) send_wrong_secret(server->port(), deadline);
    run.served_after = hello_accepted(server->port(), deadline);
    run.running = lines_of(capture.so_far());
  }  // the server stops here: the count line, if any, is printed by now
  run.lines = lines_of(capture.text());
  return run;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string all;
  for (const std::string& l : lines) all += l + "\n";
  return all;
}

}  // namespace

TEST_CASE("store server: a flood of refused connections prints the first ones and a count",
          "[rendezvous][store][rejects]") {
  const Run run = refuse(static_cast<int>(detail::kMaxRejectLines) + 15);
  INFO("stderr:\n" << joined(run.lines));
  CHECK(run.served_after);
  CHECK(run.lines.size() == detail::kMaxRejectLines + 2);
  CHECK(count_containing(run.lines, "store server refused 127.0.0.1:") ==
        detail::kMaxRejectLines);
  CHECK(count_containing(run.lines, "wrong secret") == detail::kMaxRejectLines);
  REQUIRE(run.lines.size() >= detail::kMaxRejectLines + 1);
  // The cap's line comes right after the last line shown, before the server stops.
  CHECK(run.lines[detail::kMaxRejectLines] == kCapRefused);
  CHECK(run.running.size() == detail::kMaxRejectLines + 1);
  CHECK(count_containing(run.running, kCapRefused) == 1);
  CHECK_THAT(run.lines.back(), Contains("... and 15 more refused connections (only the first 10"));
}

TEST_CASE("store server: a few refused connections are each printed, with no count",
          "[rendezvous][store][rejects]") {
  const Run run = refuse(3);
  INFO("stderr:\n" << joined(run.lines));
  CHECK(run.served_after);
  CHECK(run.lines.size() == 3);
  CHECK(count_containing(run.lines, "store server refused") == 3);
  CHECK(count_containing(run.lines, "more refused") == 0);
  CHECK(count_containing(run.lines, "more than") == 0);
}

TEST_CASE("store server: one refusal past the printed ones is counted in the singular",
          "[rendezvous][store][rejects]") {
  const Run run = refuse(static_cast<int>(detail::kMaxRejectLines) + 1);
  INFO("stderr:\n" << joined(run.lines));
  CHECK(run.lines.size() == detail::kMaxRejectLines + 2);
  CHECK(count_containing(run.running, kCapRefused) == 1);
  REQUIRE_FALSE(run.lines.empty());
  CHECK_THAT(run.lines.back(), Contains("... and 1 more refused connection ("));
}

// Connections that never say hello are closed too, evicted once kMaxPending wait or when their
// hello time runs out; a port scanner makes exactly these, so their lines have the same cap and
// one count line of their own.
namespace {

// Whether the server closed `s` (end of file) before `deadline`.
bool closed_by_server(const detail::Socket& s, Clock::time_point deadline) {
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{s.fd(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char c = 0;
    const ssize_t n = ::recv(s.fd(), &c, 1, 0);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) return true;
  }
}

// `silent` connections that send nothing, of which the first `closed_first` must be closed by
// the server before a good client says hello; then the server stops.
Run stay_silent(int silent, int closed_first) {
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  Run run;
  StderrCapture capture;
  {
    auto server = std::make_unique<detail::StoreServer>("127.0.0.1", 0, kSecret);
    std::vector<detail::Socket> quiet;
    for (int i = 0; i < silent; ++i)
      quiet.push_back(detail::connect_until("127.0.0.1", server->port(), deadline));
    bool all_closed = true;
    for (int i = 0; i < closed_first; ++i)
      all_closed = closed_by_server(quiet[i], deadline) && all_closed;
    CHECK(all_closed);
    run.served_after = hello_accepted(server->port(), deadline);
    run.running = lines_of(capture.so_far());
  }
  run.lines = lines_of(capture.text());
  return run;
}

}  // namespace

TEST_CASE("store server: evicted silent connections print the first ones and a count",
          "[rendezvous][store][rejects]") {
  // kMaxPending wait, 15 more evict the 15 oldest, and the good client one more.
  const int pending = static_cast<int>(detail::kMaxPending);
  const Run run = stay_silent(pending + 15, 15);
  INFO("stderr:\n" << joined(run.lines));
  CHECK(run.served_after);
  CHECK(run.lines.size() == detail::kMaxRejectLines + 2);
  CHECK(count_containing(run.lines, "store server evicted a silent connection from 127.0.0.1:") ==
        detail::kMaxRejectLines);
  CHECK(count_containing(run.running, kCapSilent) == 1);
  REQUIRE_FALSE(run.lines.empty());
  CHECK_THAT(run.lines.back(),
             Contains("... and 6 more silent connections closed (evicted, or no hello in time; "
                      "only the first 10 are shown)"));
}

TEST_CASE("store server: a few evicted silent connections are each printed, with no count",
          "[rendezvous][store][rejects]") {
  const Run run = stay_silent(static_cast<int>(detail::kMaxPending) + 2, 2);
  INFO("stderr:\n" << joined(run.lines));
  CHECK(run.served_after);
  CHECK(run.lines.size() == 3);
  CHECK(count_containing(run.lines, "evicted a silent connection") == 3);
  CHECK(count_containing(run.lines, "more silent") == 0);
  CHECK(count_containing(run.lines, "more than") == 0);
}

TEST_CASE("store server: connections with no hello in time print the first ones and a count",
          "[rendezvous][store][rejects]") {
  // Closed together once kHelloWait passed: a wait of about 5 s.
  const Run run = stay_silent(static_cast<int>(detail::kMaxRejectLines) + 2,
                              static_cast<int>(detail::kMaxRejectLines) + 2);
  INFO("stderr:\n" << joined(run.lines));
  CHECK(run.served_after);
  CHECK(run.lines.size() == detail::kMaxRejectLines + 2);
  CHECK(count_containing(run.lines, "that sent no hello within 5000 ms") ==
        detail::kMaxRejectLines);
  CHECK(count_containing(run.running, kCapSilent) == 1);
  REQUIRE_FALSE(run.lines.empty());
  CHECK_THAT(run.lines.back(), Contains("... and 2 more silent connections closed"));
}
