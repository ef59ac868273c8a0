// ferry::Store (backends/rendezvous/store.h): several ranks as threads of this process, each with
// its own Store over TCP on loopback, as the rendezvous tests run their ranks.
#include <ferry/backends/rendezvous/store.h>
#include <ferry/backends/rendezvous/socket_io.h>
#include <ferry/backends/rendezvous/store_protocol.h>
#include <ferry/runtime/error.h>

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <string>
#include <thread>
#include <vector>

using namespace ferry;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace {

constexpr const char* kSecret = "store-test-secret";

StoreOptions options(int rank, int port, std::chrono::milliseconds timeout = 20s) {
  StoreOptions o;
  o.address = "127.0.0.1:" + std::to_string(port);
  o.rank = rank;
  o.secret = kSecret;
  o.timeout = timeout;
  return o;
}

// Rank 0's store on a free port, and a client store per other rank.
struct Job {
  Store server;
  std::vector<Store> clients;
  explicit Job(int world) : server(options(0, 0)) {
    for (int r = 1; r < world; ++r) clients.emplace_back(options(r, server.port()));
  }
  Store& rank(int r) { return r == 0 ? server : clients[r - 1]; }
};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

TEST_CASE("store: set, get, add, wait, check, delete across 4 ranks", "[store]") {
  constexpr int kWorld = 4;
  Job job(kWorld);
  std::vector<std::thread> ranks;
  std::vector<std::string> seen(kWorld * kWorld);
  std::vector<int64_t> added(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    ranks.emplace_back([&, r] {
      Store& s = job.rank(r);
      s.set("addr/" + std::to_string(r), "rank " + std::to_string(r) + std::string(1, '\0') + "!");
      for (int p = 0; p < kWorld; ++p) seen[r * kWorld + p] = s.get("addr/" + std::to_string(p));
      added[r] = s.add("joined", 1);
      s.wait({"addr/0", "addr/1", "addr/2", "addr/3"});
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < kWorld; ++r)
    for (int p = 0; p < kWorld; ++p)
      CHECK(seen[r * kWorld + p] == "rank " + std::to_string(p) + std::string(1, '\0') + "!");
  // Each add saw a distinct count: 1..4 in some order.
  std::sort(added.begin(), added.end());
  CHECK(added == std::vector<int64_t>{1, 2, 3, 4});
  Store& s = job.rank(2);
  CHECK(s.get("joined") == "4");
  CHECK(s.add("joined", -10) == -6);
  CHECK(s.check({"addr/0", "joined"}));
  CHECK_FALSE(s.check({"addr/0", "nobody"}));
  CHECK(s.check({}));
  CHECK(s.num_keys() == kWorld + 1);
  CHECK(job.rank(1).delete_key("addr/3"));
  CHECK_FALSE(job.rank(1).delete_key("addr/3"));
  CHECK(job.rank(0).num_keys() == kWorld);
  CHECK_FALSE(job.rank(3).check({"addr/3"}));
}

TEST_CASE("store: get blocks until another rank sets the key", "[store]") {
  Job job(2);
  const auto t0 = Clock::now();
  auto later = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(150ms);
    job.rank(0).set("late", "here");
  });
  CHECK(job.rank(1).get("late") == "here");
  CHECK(seconds_since(t0) >= 0.14);
  later.get();
  // A wait parked on several keys returns once the last of them is set.
  auto waiter = std::async(std::launch::async, [&] { job.rank(1).wait({"a", "b"}, 10s); });
  job.rank(0).set("a", "1");
  CHECK(waiter.wait_for(100ms) == std::future_status::timeout);
  job.rank(0).add("b", 7);
  waiter.get();
  CHECK(job.rank(1).get("b") == "7");
}

TEST_CASE("store: a get that times out names the key, the rank and the wait", "[store]") {
  Job job(2);
  const auto t0 = Clock::now();
  try {
    job.rank(1).get("never/set", 200ms);
    FAIL("get returned a key nobody set");
  } catch (const TimeoutError& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Contains("ferry::Store::get on rank 1"));
    CHECK_THAT(what, Contains("'never/set'"));
    CHECK_THAT(what, Contains("200 ms"));
  }
  const double took = seconds_since(t0);
  CHECK(took >= 0.19);
  CHECK(took < 3.0);
  // wait() names the keys still missing, not the ones that arrived.
  job.rank(0).set("here", "x");
  try {
    job.rank(0).wait({"here", "gone"}, 100ms);
    FAIL("wait returned with a key missing");
  } catch (const TimeoutError& e) {
    CHECK_THAT(e.what(), Contains("ferry::Store::wait on rank 0: key(s) 'gone' of the 2"));
  }
  // The store still serves after the timeouts.
  CHECK(job.rank(1).get("here", 1s) == "x");
}

TEST_CASE("store: concurrent adds from every rank and thread sum exactly", "[store]") {
  constexpr int kWorld = 3, kThreads = 3, kAdds = 200;
  Job job(kWorld);
  std::vector<std::thread> threads;
  std::atomic<int64_t> expected{0};
  for (int r = 0; r < kWorld; ++r)
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, r, t] {
        int64_t mine = 0;
        for (int i = 0; i < kAdds; ++i) {
          const int64_t delta = (r + 1) * 1000 + t * 10 + i % 7 - 3;  // some negative steps too
          job.rank(r).add("sum", i % 5 == 0 ? -delta : delta);
          mine += i % 5 == 0 ? -delta : delta;
        }
        expected += mine;
      });
  for (std::thread& t : threads) t.join();
  CHECK(job.rank(1).add("sum", 0) == expected.load());
  CHECK(job.rank(2).get("sum") == std::to_string(expected.load()));
}

TEST_CASE("store: bad input is refused, naming the op", "[store]") {
  Job job(2);
  Store& s = job.rank(1);
  CHECK_THROWS_WITH(s.set("", "v"), Contains("ferry::Store::set on rank 1") &&
                                        Contains("an empty key"));
  CHECK_THROWS_AS(s.get(""), InvalidArgument);
  CHECK_THROWS_WITH(s.get(std::string(detail::kStoreMaxKeyBytes + 1, 'k')),
                    Contains("ferry::Store::get") && Contains("4097 bytes"));
  CHECK_THROWS_WITH(s.set("big", std::string(detail::kStoreMaxValueBytes + 1, 'v')),
                    Contains("ferry::Store::set") && Contains("'big'"));
  CHECK_THROWS_WITH(s.wait({"a"}, 0ms), Contains("ferry::Store::wait") && Contains("positive"));
  CHECK_THROWS_WITH(s.wait(std::vector<std::string>(detail::kStoreMaxKeysPerCall + 1, "k")),
                    Contains("ferry::Store::wait") && Contains("1025"));
  CHECK_THROWS_AS(s.delete_key(""), InvalidArgument);
  s.set("text", "not a number");
  CHECK_THROWS_WITH(s.add("text", 1), Contains("ferry::Store::add on rank 1") &&
                                          Contains("not a decimal integer"));
  s.set("top", std::to_string(INT64_MAX));
  CHECK_THROWS_WITH(s.add("top", 1), Contains("overflows"));
  // The largest value goes through whole.
  const std::string largest(detail::kStoreMaxValueBytes, 'z');
  s.set("largest", largest);
  CHECK(job.rank(0).get("largest") == largest);
  // Options.
  StoreOptions no_secret = options(1, job.server.port());
  no_secret.secret = std::string(300, 's');
  CHECK_THROWS_WITH(Store(no_secret), Contains("FERRY_SECRET"));
  CHECK_THROWS_WITH(Store(options(1, 0)), Contains("port 0"));
  StoreOptions bad_address = options(1, 1);
  bad_address.address = "nocolon";
  CHECK_THROWS_WITH(Store(bad_address), Contains("StoreOptions::address"));
}

TEST_CASE("store: a client with the wrong secret is refused", "[store]") {
  Job job(1);
  StoreOptions o = options(1, job.server.port());
  o.secret = "not-the-secret";
  Store intruder(o);
  CHECK_THROWS_WITH(intruder.set("k", "v"), Contains("refused") && Contains("wrong secret"));
  CHECK_FALSE(job.server.check({"k"}));
}

TEST_CASE("store: silent and garbage connections do not hold the server up", "[store]") {
  Job job(2);
  const auto deadline = Clock::now() + 5s;
  std::vector<detail::Socket> silent;
  for (int i = 0; i < 80; ++i)  // more than the cap of waiting connections
    silent.push_back(detail::connect_until("127.0.0.1", job.server.port(), deadline));
  detail::Socket garbage = detail::connect_until("127.0.0.1", job.server.port(), deadline);
  const std::string junk(64, 'x');
  detail::write_all(garbage, junk.data(), junk.size(), deadline, "server");
  const auto t0 = Clock::now();
  job.rank(1).set("k", "v");
  CHECK(job.rank(0).get("k") == "v");
  CHECK(seconds_since(t0) < 2.0);
}

TEST_CASE("store: rank 0's store ends at once; a client waiting then fails, not hangs",
          "[store][shutdown]") {
  auto server = std::make_unique<Store>(options(0, 0));
  Store client(options(1, server->port(), 60s));
  client.set("k", "v");
  auto waiting = std::async(std::launch::async, [&] { return client.get("never", 60s); });
  std::this_thread::sleep_for(100ms);  // parked on the server by now (if not, it fails sooner)
  const auto t0 = Clock::now();
  server.reset();
  CHECK(seconds_since(t0) < 1.0);  // the destructor waits for nobody
  CHECK_THROWS_WITH(waiting.get(), Contains("ferry::Store::get on rank 1"));
  CHECK(seconds_since(t0) < 2.0);  // the client learned at once, not at its 60 s deadline
  // A new connection is refused now: the client knows the store served it and is gone, so it
  // does not retry for its 60 s deadline as it would for a server that has not started yet.
  CHECK_THROWS_AS(client.set("k", "w"), TransportError);
  CHECK_THROWS_WITH(client.num_keys(), Contains("is gone"));
  CHECK(seconds_since(t0) < 6.0);
}

TEST_CASE("store: a client connects while rank 0 is not listening yet", "[store]") {
  // The port is held, bound but not listening (connections to it are refused, and no other
  // process can take it), until rank 0's store binds it too (both with SO_REUSEADDR, which Linux
  // allows while neither listens) after the client has started calling.
  const int held = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(held >= 0);
  const int one = 1;
  REQUIRE(::setsockopt(held, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(held, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(held, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  const int port = ntohs(addr.sin_port);
  Store client(options(1, port, 10s));
  auto early = std::async(std::launch::async, [&] { return client.get("hello", 10s); });
  std::this_thread::sleep_for(200ms);
  CHECK(early.wait_for(0ms) == std::future_status::timeout);  // still retrying
  Store server(options(0, port));
  ::close(held);
  server.set("hello", "world");
  CHECK(early.get() == "world");
}
