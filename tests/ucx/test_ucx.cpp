// The UCX transport across processes (the test starts them itself, joined by the TCP
// rendezvous) and the rendezvous against garbage.
#include <ferry/backends/rendezvous/rendezvous_frame.h>
#include <ferry/backends/ucx/ucx_cma.h>
#include <ferry/backends/ucx/ucx_tag.h>
#include <ferry/backends/ucx/ucx_worker.h>
#include <ferry/backends/rendezvous/socket_io.h>
#include <ferry/backends/rendezvous/tcp_rendezvous.h>
#include <ferry/runtime/error.h>
#include "tests/ucx/child_scenarios.h"
#include "tools/run/rank_processes.h"

#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <random>
#include <thread>

using namespace ferry;
using Catch::Matchers::Contains;

namespace {

// Runs `scenario` on `ranks` processes of this binary.
std::vector<run::RankExit> run_scenario(const std::string& scenario, int ranks,
                                        std::vector<std::pair<std::string, std::string>> env) {
  run::LaunchOptions o;
  o.ranks = ranks;
  o.argv = {"/proc/self/exe", "--child", scenario};
  o.env = std::move(env);
  o.timeout = std::chrono::seconds(90);
  o.grace = std::chrono::seconds(30);
  return run::launch_ranks(o);
}

void require_all_passed(const std::vector<run::RankExit>& exits) {
  for (const auto& e : exits) {
    INFO(run::describe(e));
    CHECK((e.exited && e.status == 0));
  }
}

}  // namespace

TEST_CASE("ucx: point-to-point contract across processes (exact sizes, zero bytes, tags, order)",
          "[ucx][process]") {
  SECTION("2 ranks, shared memory") { require_all_passed(run_scenario("p2p", 2, {})); }
  SECTION("3 ranks, shared memory") { require_all_passed(run_scenario("p2p", 3, {})); }
  SECTION("2 ranks, UCX_TLS=tcp,self") {
    require_all_passed(run_scenario("p2p", 2, {{"UCX_TLS", "tcp,self"}}));
  }
}

TEST_CASE("ucx: a rank killed mid-collective makes the survivors raise PeerFailure in time",
          "[ucx][process][failure]") {
  // FERRY_TIMEOUT is 60 s; the survivors must fail within 10 s (the pidfd watch sees the death
  // at once; UCX's keepalive runs every second; on TCP the broken connection is seen too). Over
  // shared memory, TCP, and without UCX's peer error handling (pidfd watch only).
  // The 64 MiB all_reduce's messages take ferry's CMA protocol (a survivor may be reading the
  // victim's memory, or waiting for its acknowledgement, when it dies), except with
  // FERRY_UCX_CMA=0.
  auto variant = GENERATE(as<std::string>{}, "shm", "tcp", "no-peer-errors", "no-cma");
  INFO(variant);
  std::vector<std::pair<std::string, std::string>> env = {{"FERRY_TIMEOUT", "60"},
                                                          {ucxtest::kParamVar, "10"}};
  if (variant == "tcp") env.push_back({"UCX_TLS", "tcp,self"});
  if (variant == "no-peer-errors") env.push_back({"FERRY_UCX_ERROR_HANDLING", "none"});
  if (variant == "no-cma") env.push_back({"FERRY_UCX_CMA", "0"});
  auto exits = run_scenario("kill", 3, env);
  for (int r = 0; r < 2; ++r) {
    INFO(run::describe(exits[r]));
    CHECK((exits[r].exited && exits[r].status == 0));
    CHECK(exits[r].seconds < 30);
  }
  INFO(run::describe(exits[2]));
  CHECK((!exits[2].exited && exits[2].signal == SIGKILL && !exits[2].killed_by_us));
}

TEST_CASE("ucx: a peer's last message arrives though its receiver saw it end first",
          "[ucx][process][failure]") {
  // tests/ucx/last_message_scenario.cpp: rank 1 holds a slot of rank 0's shared-memory ring
  // while rank 2 sends its message behind it and ends.
  require_all_passed(run_scenario("last-message", 3, {{"FERRY_TIMEOUT", "30"}}));
}

TEST_CASE("ucx: large messages between ranks on one host are read from the sender's memory",
          "[ucx][process][cma]") {
  SECTION("2 ranks, shared memory") {
    require_all_passed(run_scenario("cma", 2, {{ucxtest::kParamVar, "cma"}}));
  }
  SECTION("3 ranks, shared memory") {
    require_all_passed(run_scenario("cma", 3, {{ucxtest::kParamVar, "cma"}}));
  }
  SECTION("2 ranks, UCX_TLS=tcp,self (descriptors over TCP, data by CMA)") {
    require_all_passed(
        run_scenario("cma", 2, {{ucxtest::kParamVar, "cma"}, {"UCX_TLS", "tcp,self"}}));
  }
  SECTION("2 ranks, FERRY_UCX_ERROR_HANDLING=none") {
    require_all_passed(run_scenario(
        "cma", 2, {{ucxtest::kParamVar, "cma"}, {"FERRY_UCX_ERROR_HANDLING", "none"}}));
  }
  SECTION("FERRY_UCX_CMA=0 turns it off") {
    require_all_passed(run_scenario("cma", 2, {{ucxtest::kParamVar, "off"}, {"FERRY_UCX_CMA", "0"}}));
  }
  SECTION("reads refused (non-dumpable, no CAP_SYS_PTRACE): UCX carries the data") {
    require_all_passed(run_scenario("cma", 3, {{ucxtest::kParamVar, "fallback"}}));
  }
}

TEST_CASE("ucx: a large message of another size fails on both sides, in time",
          "[ucx][process][cma]") {
  require_all_passed(run_scenario("cma-mismatch", 2, {{"FERRY_TIMEOUT", "60"},
                                                      {ucxtest::kParamVar, "10"}}));
}

TEST_CASE("ucx: a withdrawn large send tells a receiver that cannot read it, in time",
          "[ucx][process][cma]") {
  require_all_passed(run_scenario("cma-withdrawn-send", 2, {{"FERRY_TIMEOUT", "30"},
                                                            {ucxtest::kParamVar, "10"}}));
}

TEST_CASE("ucx CMA: descriptors and acknowledgements are validated; reads fail cleanly",
          "[ucx][cma]") {
  using namespace detail;
  std::string error;
  unsigned char wire[kCmaDescriptorBytes];
  encode_cma_descriptor({7, 0x1000, 4096}, wire);
  auto d = decode_cma_descriptor(wire, sizeof wire, error);
  REQUIRE(d.has_value());
  CHECK((d->cookie == 7 && d->address == 0x1000 && d->bytes == 4096));
  auto corrupt = [&](size_t at, unsigned char v) {
    unsigned char copy[kCmaDescriptorBytes];
    std::memcpy(copy, wire, sizeof copy);
    copy[at] = v;
    error.clear();
    auto r = decode_cma_descriptor(copy, sizeof copy, error);
    return r ? std::string("accepted") : error;
  };
  CHECK_THAT(corrupt(0, 'X'), Contains("bad magic"));
  CHECK_THAT(corrupt(4, 9), Contains("version 9"));
  CHECK_THAT(corrupt(15, 0x80), Contains("cookie"));  // beyond 47 bits
  {
    unsigned char copy[kCmaDescriptorBytes];
    encode_cma_descriptor({7, 0, 4096}, copy);
    CHECK_FALSE(decode_cma_descriptor(copy, sizeof copy, error).has_value());
    encode_cma_descriptor({7, ~uint64_t{0} - 10, 4096}, copy);  // wraps around
    CHECK_FALSE(decode_cma_descriptor(copy, sizeof copy, error).has_value());
    CHECK_THAT(error, Contains("wraps"));
    encode_cma_descriptor({0, 0x1000, 4096}, copy);
    CHECK_FALSE(decode_cma_descriptor(copy, sizeof copy, error).has_value());
  }
  CHECK_FALSE(decode_cma_descriptor(wire, sizeof wire - 1, error).has_value());
  CHECK_FALSE(decode_cma_descriptor(nullptr, sizeof wire, error).has_value());
  unsigned char ack[kCmaAckBytes];
  encode_cma_ack({9, CmaAckStatus::Mismatch, 123}, ack);
  auto a = decode_cma_ack(ack, sizeof ack, error);
  REQUIRE(a.has_value());
  CHECK((a->cookie == 9 && a->status == CmaAckStatus::Mismatch && a->value == 123));
  ack[6] = 77;  // status
  CHECK_FALSE(decode_cma_ack(ack, sizeof ack, error).has_value());
  CHECK_THAT(error, Contains("status 77"));
  // Random bytes: a third entirely random (the magic rejects them), a third with a valid magic
  // and version (the cookie's range rejects nearly all), a third with a valid header and cookie
  // and a random address and size (decoded unless the range is empty or wraps, and then
  // exactly as sent).
  std::mt19937_64 rng(5);
  int rejected = 0, random_accepted = 0, valid_header_accepted = 0, decoded = 0;
  int expected_rejections = 0;
  for (int i = 0; i < 30000; ++i) {
    unsigned char raw[kCmaDescriptorBytes];
    for (unsigned char& b : raw) b = static_cast<unsigned char>(rng());
    const int kind = i % 3;
    uint64_t cookie = 0, address = 0, bytes = 0;
    if (kind >= 1) std::memcpy(raw, wire, 8);  // valid magic and version
    if (kind == 2) {
      cookie = 1 + rng() % kUcxMaxCmaCookie;
      // Small and huge values alike, zeros too: the edges of the range check.
      address = i % 7 == 0 ? 0 : rng() >> (rng() % 64);
      bytes = i % 11 == 0 ? 0 : rng() >> (rng() % 64);
      std::memcpy(raw + 8, &cookie, 8);
      std::memcpy(raw + 16, &address, 8);
      std::memcpy(raw + 24, &bytes, 8);
      if (address == 0 || bytes == 0 || address + bytes < address) ++expected_rejections;
    }
    error.clear();
    auto r = decode_cma_descriptor(raw, sizeof raw, error);
    if (!r) {
      ++rejected;
      CHECK_FALSE(error.empty());
      if (kind == 2) CHECK_THAT(error, Contains("empty or wraps"));
      continue;
    }
    CHECK((r->cookie >= 1 && r->cookie <= kUcxMaxCmaCookie));
    CHECK((r->address != 0 && r->bytes != 0 && r->address + r->bytes > r->address));
    if (kind == 0) ++random_accepted;
    if (kind == 1) ++valid_header_accepted;
    if (kind == 2) {
      ++decoded;
      CHECK((r->cookie == cookie && r->address == address && r->bytes == bytes));
    }
  }
  INFO("decoded with a valid header and cookie: " << decoded << "; rejected: " << rejected);
  CHECK(random_accepted == 0);
  // A random 64-bit cookie lands in 1 .. 2^47 - 1 with probability 2^-17.
  CHECK(valid_header_accepted <= 5);
  CHECK(rejected == 20000 - valid_header_accepted + expected_rejections);
  CHECK(decoded == 10000 - expected_rejections);
  CHECK(decoded > 5000);
  // Reads: this process's own memory works, an unmapped range is Failed (EFAULT), and a
  // process that does not exist is Gone.
  std::vector<char> src(100000, 'a'), dst(100000, 'b');
  CmaReadResult ok = cma_read(static_cast<uint32_t>(getpid()),
                              reinterpret_cast<uint64_t>(src.data()), dst.data(), dst.size());
  CHECK(ok.outcome == CmaReadOutcome::Done);
  CHECK(dst == src);
  CmaReadResult fault = cma_read(static_cast<uint32_t>(getpid()), 4096, dst.data(), 100);
  CHECK(fault.outcome == CmaReadOutcome::Failed);
  CHECK(fault.error == EFAULT);
  const pid_t child = fork();
  if (child == 0) _exit(0);
  REQUIRE(child > 0);
  int status = 0;
  waitpid(child, &status, 0);  // reaped: the pid names no process
  CmaReadResult gone = cma_read(static_cast<uint32_t>(child),
                                reinterpret_cast<uint64_t>(src.data()), dst.data(), 100);
  CHECK(gone.outcome == CmaReadOutcome::Gone);
}

TEST_CASE("ucx CMA: a peer is read only where its pid holds its published token", "[ucx][cma]") {
  using namespace detail;
  const CmaToken& mine = cma_self_token();
  CHECK(&mine == &cma_self_token());
  CHECK(mine.address != 0);
  const auto self = static_cast<uint32_t>(getpid());
  std::string why;
  CHECK(cma_token_matches(self, mine, why));
  // Another value at that address: the pid names another process (another pid namespace).
  CmaToken other = mine;
  other.value[3] ^= 0x5A;
  CHECK_FALSE(cma_token_matches(self, other, why));
  CHECK_THAT(why, Contains("another token"));
  // An address where nothing is mapped, none at all, a pid with no process.
  CmaToken unmapped = mine;
  unmapped.address = 4096;
  CHECK_FALSE(cma_token_matches(self, unmapped, why));
  CHECK_THAT(why, Contains("could not be read"));
  CHECK_FALSE(cma_token_matches(self, CmaToken{}, why));
  const pid_t child = fork();
  if (child == 0) _exit(0);
  REQUIRE(child > 0);
  int status = 0;
  waitpid(child, &status, 0);
  CHECK_FALSE(cma_token_matches(static_cast<uint32_t>(child), mine, why));
}

TEST_CASE("ucx worker: a test runs at most one deferred job; a wait stops once its op is done",
          "[ucx]") {
  // Deferred jobs are CMA reads of up to gigabytes: Request::test() (which never blocks) must
  // not run a whole queue of them, and a waiter must not keep reading for others once its own
  // op is done.
  detail::UcxWorker worker(1);
  std::atomic<int> ran{0};
  auto queue = [&](int jobs) {
    auto lock = worker.lock();
    for (int i = 0; i < jobs; ++i) worker.defer_locked([&] { ran.fetch_add(1); });
  };
  queue(3);
  worker.try_progress();
  CHECK(ran.load() == 1);
  worker.try_progress();
  CHECK(ran.load() == 2);
  worker.try_progress();
  worker.try_progress();
  CHECK(ran.load() == 3);
  ran = 0;
  queue(4);
  CHECK(worker.wait_until([&] { return ran.load() >= 1; }, Clock::now() + std::chrono::seconds(5)));
  CHECK(ran.load() == 1);
  CHECK(worker.wait_until([&] { return ran.load() >= 3; }, Clock::now() + std::chrono::seconds(5)));
  CHECK(ran.load() == 3);
  worker.try_progress();  // the last one, so the worker goes with an empty queue
  CHECK(ran.load() == 4);
}

TEST_CASE("ucx: a rank that gives up on a group makes its peers fail at once", "[ucx][process]") {
  require_all_passed(run_scenario("abandon", 3, {{"FERRY_TIMEOUT", "60"},
                                                 {ucxtest::kParamVar, "5"}}));
}

TEST_CASE("ucx: FERRY_BACKEND=ucx without mpiexec or a rendezvous says how to start it",
          "[ucx][process]") {
  require_all_passed(run_scenario("no-bootstrap", 1, {{"FERRY_RENDEZVOUS", ""}}));
}

TEST_CASE("ucx: the launcher binds the rendezvous port and rank 0 listens on that socket",
          "[ucx][process]") {
  SECTION("2 ranks") { require_all_passed(run_scenario("rendezvous-handoff", 2, {})); }
  SECTION("3 ranks") { require_all_passed(run_scenario("rendezvous-handoff", 3, {})); }
  SECTION("a descriptor that is no listening socket is refused") {
    require_all_passed(run_scenario("rendezvous-bad-fd", 2,
                                    {{"FERRY_RENDEZVOUS_FD", "0"}, {"FERRY_TIMEOUT", "3"}}));
  }
}

// ---------------------------------------------------------------------------------------------
// The rendezvous, in this process: rank 0 and the real ranks on threads, garbage from raw
// sockets.

namespace {

RendezvousOptions options_for(int rank, int size, int port) {
  RendezvousOptions o;
  o.rank = rank;
  o.size = size;
  o.port = port;
  o.secret = "job-secret-42";
  o.timeout = std::chrono::seconds(20);
  return o;
}

// Connects to the port, writes `bytes`, and returns whatever the server answers before it
// closes the connection (or 2 s pass).
std::string poke(int port, const std::string& bytes) {
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  detail::Socket s = detail::connect_until("127.0.0.1", port, deadline);
  if (!bytes.empty()) detail::write_all(s, bytes.data(), bytes.size(), deadline, "server");
  ::shutdown(s.fd(), SHUT_WR);  // we are done talking: a server waiting for more sees EOF
  std::string answer;
  char buf[4096];
  for (;;) {
    try {
      detail::read_exact(s, buf, 1, deadline, "server");
    } catch (const Error&) {
      break;  // closed, or nothing more
    }
    answer.push_back(buf[0]);
  }
  return answer;
}

std::string hello(uint32_t rank, uint32_t world, const std::string& secret,
                  const std::string& payload, uint32_t payload_claim) {
  detail::FrameHeader h{detail::FrameType::Hello, 0, rank, world,
                        static_cast<uint32_t>(secret.size()), payload_claim};
  return detail::encode_header(h) + secret + payload;
}

}  // namespace

TEST_CASE("rendezvous: garbage on the port is rejected, named, and the job still starts",
          "[rendezvous]") {
  std::promise<int> port_promise;
  auto port_future = port_promise.get_future();
  auto server = std::async(std::launch::async, [&] {
    RendezvousOptions o = options_for(0, 2, 0);
    o.on_listening = [&](int port) { port_promise.set_value(port); };
    return tcp_rendezvous(o, "blob-of-rank-0");
  });
  const int port = port_future.get();
  const std::string secret = "job-secret-42";
  std::mt19937 rng(7);
  std::string noise(512, '\0');
  for (char& ch : noise) ch = static_cast<char>(rng());
  std::string bad_magic = hello(1, 2, secret, "x", 1);
  bad_magic[0] ^= 0x55;
  std::string bad_version = hello(1, 2, secret, "x", 1);
  bad_version[4] = 9;
  std::string bad_seq = hello(1, 2, secret, "x", 1);
  bad_seq[8] = 3;
  const std::vector<std::pair<std::string, std::string>> garbage = {
      {"random bytes", noise},
      {"bad magic", bad_magic},
      {"bad version", bad_version},
      {"bad sequence", bad_seq},
      {"HTTP", "GET / HTTP/1.1\r\nHost: x\r\n\r\n"},
      {"a rank outside the world", hello(5, 2, secret, "x", 1)},
      {"rank 0 claimed by a client", hello(0, 2, secret, "x", 1)},
      {"another world size", hello(1, 3, secret, "x", 1)},
      {"wrong secret", hello(1, 2, "guess", "x", 1)},
      {"a 4 GiB payload claim", hello(1, 2, secret, "", 0xFFFFFFFFu)},
      {"a huge secret claim", detail::encode_header({detail::FrameType::Hello, 0, 1, 2,
                                                     0x7FFFFFFF, 1})},
      {"a truncated header", hello(1, 2, secret, "x", 1).substr(0, 10)},
      {"a payload shorter than claimed", hello(1, 2, secret, "abc", 100)},
      {"nothing at all", ""},
  };
  for (const auto& [what, bytes] : garbage) {
    INFO(what);
    const std::string answer = poke(port, bytes);
    // Either a Reject frame or a plain close; never a table (which would leak addresses).
    if (!answer.empty()) {
      std::string error;
      auto h = detail::decode_header(reinterpret_cast<const unsigned char*>(answer.data()),
                                     detail::FrameExpectation{{detail::FrameType::Reject}, 1, 2, false},
                                     error);
      CHECK(h.has_value());
    }
  }
  // The real rank 1 joins afterwards and both get the table.
  RendezvousResult r1 = tcp_rendezvous(options_for(1, 2, port), "blob-of-rank-1");
  RendezvousResult r0 = server.get();
  CHECK(r1.blobs == std::vector<std::string>{"blob-of-rank-0", "blob-of-rank-1"});
  CHECK(r0.blobs == r1.blobs);
  REQUIRE(r0.rejected.size() == garbage.size());
  for (const std::string& why : r0.rejected) CHECK_THAT(why, Contains("the peer at 127.0.0.1:"));
  CHECK_THAT(r0.rejected[0], Contains("bad magic"));
  CHECK_THAT(r0.rejected[2], Contains("version"));
  CHECK_THAT(r0.rejected[5], Contains("rank 5 outside"));
  CHECK_THAT(r0.rejected[7], Contains("world size 3"));
  CHECK_THAT(r0.rejected[8], Contains("wrong secret"));
  CHECK_THAT(r0.rejected[9], Contains("payload"));
  CHECK_THAT(r0.rejected[10], Contains("secret of"));
}

TEST_CASE("rendezvous: a rank rejected by rank 0 learns why; rank 0 names the missing rank",
          "[rendezvous]") {
  std::promise<int> port_promise;
  auto port_future = port_promise.get_future();
  auto server = std::async(std::launch::async, [&] {
    RendezvousOptions o = options_for(0, 2, 0);
    o.timeout = std::chrono::milliseconds(1500);
    o.on_listening = [&](int port) { port_promise.set_value(port); };
    return tcp_rendezvous(o, "blob-of-rank-0");
  });
  const int port = port_future.get();
  RendezvousOptions wrong = options_for(1, 2, port);
  wrong.secret = "not-the-secret";
  try {
    tcp_rendezvous(wrong, "blob-of-rank-1");
    FAIL("a rank with the wrong secret was accepted");
  } catch (const TransportError& e) {
    CHECK_THAT(e.what(), Contains("rejected this rank") && Contains("wrong secret"));
  }
  try {
    server.get();
    FAIL("rank 0 completed without rank 1");
  } catch (const TimeoutError& e) {
    CHECK_THAT(e.what(), Contains("rank(s) 1") && Contains("wrong secret"));
  }
}

TEST_CASE("rendezvous: a rank refuses garbage from whatever listens on the port", "[rendezvous]") {
  detail::Socket listener = detail::listen_on("127.0.0.1", 0);
  const int port = detail::bound_port(listener);
  const std::vector<std::pair<std::string, std::string>> answers = {
      {"bad magic", std::string(64, 'Z')},
      {"a table without the secret",
       detail::encode_header({detail::FrameType::Table, 1, 0, 2, 0, 0})},
      {"a table with a wrong entry count",
       detail::encode_header({detail::FrameType::Table, 1, 0, 2, 13, 8}) + "job-secret-42" +
           std::string("\x01\x00\x00\x00Z\x00\x00\x00", 8)},
      {"a 1 GiB table claim",
       detail::encode_header({detail::FrameType::Table, 1, 0, 2, 13, 1u << 30}) + "job-secret-42"},
  };
  for (const auto& [what, bytes] : answers) {
    INFO(what);
    auto fake = std::async(std::launch::async, [&, bytes = bytes] {
      std::string peer;
      detail::Socket s = detail::accept_until(listener, Clock::now() + std::chrono::seconds(5), peer);
      char hello[256];
      try {
        detail::read_exact(s, hello, detail::kFrameHeaderBytes, Clock::now() + std::chrono::seconds(2), "r");
      } catch (const Error&) {
      }
      detail::write_all(s, bytes.data(), bytes.size(), Clock::now() + std::chrono::seconds(2), "r");
    });
    RendezvousOptions o = options_for(1, 2, port);
    o.timeout = std::chrono::seconds(3);
    try {
      tcp_rendezvous(o, "blob");
      FAIL("garbage accepted");
    } catch (const TransportError& e) {
      CHECK_THAT(e.what(), Contains("rank 0 at 127.0.0.1:" + std::to_string(port)));
    } catch (const TimeoutError& e) {
      CHECK_THAT(e.what(), Contains("rank 0 at 127.0.0.1:" + std::to_string(port)));
    }
    fake.get();
  }
}

TEST_CASE("rendezvous frames: random bytes never decode into an unbounded frame",
          "[rendezvous]") {
  std::mt19937 rng(11);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    unsigned char raw[detail::kFrameHeaderBytes];
    for (unsigned char& b : raw) b = static_cast<unsigned char>(rng());
    if (i % 2 == 0) std::memcpy(raw, detail::encode_header({}).data(), 8);  // valid magic+version
    std::string error;
    auto h = detail::decode_header(
        raw, detail::FrameExpectation{{detail::FrameType::Hello}, 0, 4, true}, error);
    if (!h) {
      CHECK(!error.empty());
      continue;
    }
    ++accepted;
    CHECK(h->payload_bytes <= detail::max_payload(detail::FrameType::Hello, 4));
    CHECK(h->secret_bytes <= detail::kMaxSecretBytes);
  }
  std::string error;
  std::string table = detail::encode_table({"a", "bb", ""});
  CHECK(detail::decode_table(table, 3, error).value() == std::vector<std::string>{"a", "bb", ""});
  CHECK_FALSE(detail::decode_table(table, 4, error).has_value());
  CHECK_FALSE(detail::decode_table(table + "x", 3, error).has_value());
  CHECK_FALSE(detail::decode_table(table.substr(0, table.size() - 1), 3, error).has_value());
  CHECK(detail::constant_time_equal("abc", "abc"));
  CHECK_FALSE(detail::constant_time_equal("abc", "abd"));
  CHECK_FALSE(detail::constant_time_equal("abc", "abcd"));
  INFO("headers with random fields that passed validation: " << accepted);
}

// ---------------------------------------------------------------------------------------------
// ferry-run itself (its path comes from meson in FERRY_RUN_BINARY).

TEST_CASE("ferry-run passes SIGTERM on to its ranks and ends with 128 + the signal",
          "[ferry-run]") {
  const char* binary = std::getenv("FERRY_RUN_BINARY");  // set by meson test
  INFO("FERRY_RUN_BINARY must name the ferry-run binary (meson test sets it)");
  REQUIRE((binary != nullptr && *binary != '\0'));
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // Only exec after fork: this process has threads.
    execl(binary, binary, "-n", "2", "--grace", "2", "sleep", "30", static_cast<char*>(nullptr));
    _exit(127);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  REQUIRE(kill(pid, SIGTERM) == 0);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 128 + SIGTERM);
  // sleep ends at once on SIGTERM; without the forwarding ferry-run would die and leave both
  // ranks sleeping for 30 s, or wait for them.
  CHECK(seconds < 5.0);
}
