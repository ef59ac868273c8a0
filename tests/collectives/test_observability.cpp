// What a user sees of a run that goes well or badly, beyond results: the stall warning (a WARN
// line naming the ranks a collective waits for, well before its deadline), Work::then
// completion callbacks, and where the launchers' variables lead (launch_env.h, the TCP
// rendezvous options, InitOptions).
//
// The late rank in the stall tests does not sleep for a guessed time: it waits until the
// warning naming it has been logged, so the test does not depend on how fast the machine is.
#include <catch2/catch.hpp>

#include <ferry/backends/rendezvous/launch_env.h>
#include <ferry/backends/rendezvous/tcp_rendezvous.h>
#include <ferry/ferry.h>
#include <ferry/runtime/log_sink.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace ferry;

namespace {

// Collects the WARN lines of the run; waits for one that contains every given piece.
class WarnLines {
 public:
  WarnLines() {
    detail::set_log_observer([this](LogLevel level, const char*, const std::string& text) {
      if (level != LogLevel::Warn) return;
      std::lock_guard<std::mutex> lock(mu_);
      lines_.push_back(text);
      cv_.notify_all();
    });
  }
  ~WarnLines() { detail::set_log_observer(nullptr); }

  bool has(const std::vector<std::string>& pieces) {
    std::lock_guard<std::mutex> lock(mu_);
    return find(pieces);
  }
  // Blocks (no spinning) until such a line arrived or `limit` passed; false then.
  bool wait_for(const std::vector<std::string>& pieces, std::chrono::seconds limit) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, limit, [&] { return find(pieces); });
  }
  std::vector<std::string> lines() {
    std::lock_guard<std::mutex> lock(mu_);
    return lines_;
  }

 private:
  bool find(const std::vector<std::string>& pieces) const {
    for (const std::string& line : lines_) {
      bool all = true;
      for (const std::string& p : pieces) all = all && line.find(p) != std::string::npos;
      if (all) return true;
    }
    return false;
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> lines_;
};

class ScopedStallWarning {
 public:
  explicit ScopedStallWarning(std::chrono::milliseconds after) { set_stall_warning(after); }
  ~ScopedStallWarning() { set_stall_warning(std::chrono::milliseconds(-1)); }
};

// Long enough never to be reached by a test that works; the stall warning comes far earlier.
constexpr auto kDeadline = std::chrono::milliseconds(60'000);

}  // namespace

TEST_CASE("stall: a late rank is named by a WARN line long before the deadline", "[stall]") {
  set_default_timeout(kDeadline);
  ScopedStallWarning stall(std::chrono::milliseconds(100));
  const int world = GENERATE(2, 3);
  const int late = world - 1;
  const std::string op = GENERATE(as<std::string>{}, "all_reduce", "barrier");
  INFO(op << ", world " << world << ", rank " << late << " late");
  WarnLines warnings;
  const std::string names_late = "not arrived: rank " + std::to_string(late);
  std::atomic<bool> named{false};
  std::atomic<int> wrong_sums{0};  // Catch2 assertions stay on the main thread
  run_ranks(world, [&](Group& g) {
    barrier(g).wait();  // seq 0; the stalled op is seq 1
    Tensor t = full({16}, g.rank() + 1, DType::Float32);
    if (g.rank() == late) {
      // Arrive only once some rank said it waits for this one.
      named = warnings.wait_for({"stall: " + op, names_late}, std::chrono::seconds(30));
    }
    (op == "barrier" ? barrier(g) : all_reduce(t, g)).wait();
    if (op == "all_reduce" && t.get_flat(0) != world * (world + 1) / 2) ++wrong_sums;
  });
  CHECK(named);
  CHECK(wrong_sums == 0);  // the op still completes, correctly
  // Once per op and waiting rank: the late rank cannot name itself, so at most world - 1
  // lines name it for any one op (not one per 50 ms slice of the wait).
  std::map<std::string, int> naming;  // by "(seq N)"
  for (const std::string& line : warnings.lines()) {
    if (line.find(names_late) == std::string::npos) continue;
    const size_t at = line.find("(seq ");
    REQUIRE(at != std::string::npos);
    naming[line.substr(at, line.find(')', at) - at)] += 1;
    INFO(line);
    CHECK(line.find("TimeoutError in") != std::string::npos);  // says how long is left
  }
  CHECK_FALSE(naming.empty());
  for (const auto& [seq, lines] : naming) {
    INFO(seq);
    CHECK(lines <= world - 1);
  }
}

TEST_CASE("stall: FERRY_STALL_WARN_S=0 (set_stall_warning(0)) says nothing", "[stall]") {
  set_default_timeout(kDeadline);
  ScopedStallWarning off(std::chrono::milliseconds(0));
  WarnLines warnings;
  run_ranks(2, [&](Group& g) {
    // The late rank is late by far more than any automatic threshold would be in a test with
    // a 200 ms deadline; here the deadline is long and the warning off.
    if (g.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    barrier(g).wait();
  });
  CHECK_FALSE(warnings.has({"stall: "}));
}

TEST_CASE("stall: the automatic threshold is min(60 s, a quarter of the deadline)", "[stall]") {
  ScopedStallWarning automatic(std::chrono::milliseconds(-1));
  using std::chrono::milliseconds;
  // -1 means automatic whatever FERRY_STALL_WARN_S says in this environment.
  CHECK(stall_warning_after(milliseconds(300'000)) == milliseconds(60'000));
  CHECK(stall_warning_after(milliseconds(1000)) == milliseconds(250));
  set_stall_warning(milliseconds(1500));
  CHECK(stall_warning_after(milliseconds(300'000)) == milliseconds(1500));
  set_stall_warning(milliseconds(0));
  CHECK(stall_warning_after(milliseconds(300'000)) == milliseconds(0));
}

TEST_CASE("config: FERRY_STALL_WARN_S and FERRY_TIMELINE are read and checked", "[config]") {
  auto read = [](std::map<std::string, std::string> env) {
    return detail::read_config([&](const char* name) -> const char* {
      auto it = env.find(name);
      return it == env.end() ? nullptr : it->second.c_str();
    });
  };
  CHECK(read({}).stall_warn == std::chrono::milliseconds(-1));
  CHECK(read({{"FERRY_STALL_WARN_S", "0"}}).stall_warn == std::chrono::milliseconds(0));
  CHECK(read({{"FERRY_STALL_WARN_S", "2.5"}}).stall_warn == std::chrono::milliseconds(2500));
  CHECK_THROWS_WITH(read({{"FERRY_STALL_WARN_S", "soon"}}),
                    Catch::Contains("FERRY_STALL_WARN_S") && Catch::Contains("soon"));
  CHECK_THROWS_AS(read({{"FERRY_STALL_WARN_S", "-1"}}), InvalidArgument);
  CHECK(read({{"FERRY_TIMELINE", "/tmp/T.%r.json"}}).timeline == "/tmp/T.%r.json");
}

TEST_CASE("Work::then: the callback runs once, after the op, with its result", "[then]") {
  set_default_timeout(kDeadline);
  const int64_t n = GENERATE(16, 100'000);  // a direct exchange and a queued algorithm
  std::atomic<int> good{0};
  run_ranks(3, [&](Group& g) {
    Tensor t = full({n}, 1.0, DType::Float64);
    std::mutex mu;
    std::condition_variable cv;
    int calls = 0;
    double seen = 0;
    bool failed = false;
    // The callback mostly runs on the thread that drove the op to completion (the group's
    // worker, for the direct exchange too, which it drives under the Work's drive lock), and
    // it tests and waits for that same Work: the lock must have been let go by then (a second
    // lock from one thread is an error, not a deadlock or undefined behaviour).
    all_reduce(t, g).then([&](Work w) {
      try {
        if (!w.is_completed()) failed = true;
        w.wait();  // complete: returns at once
      } catch (...) {
        failed = true;
      }
      std::lock_guard<std::mutex> lock(mu);
      seen = t.get_flat(n - 1);
      ++calls;
      cv.notify_all();
    });
    // No wait() on the Work: the callback alone says the op finished.
    std::unique_lock<std::mutex> lock(mu);
    const bool called = cv.wait_for(lock, std::chrono::seconds(30), [&] { return calls > 0; });
    if (called && calls == 1 && seen == 3.0 && !failed) ++good;
  });
  CHECK(good == 3);
}

TEST_CASE("Work::then: on a completed Work it runs at once, on the calling thread", "[then]") {
  const std::thread::id me = std::this_thread::get_id();
  std::thread::id ran_on;
  int calls = 0;
  Work done;  // an empty Work is complete
  done.then([&](Work) {
    ran_on = std::this_thread::get_id();
    ++calls;
  }).then([&](Work) { ++calls; });
  CHECK(calls == 2);
  CHECK(ran_on == me);
  CHECK_THROWS_AS(done.then(nullptr), InvalidArgument);
}

TEST_CASE("Work::then: a failed op's callback sees the error; a throwing callback is logged",
          "[then]") {
  set_default_timeout(std::chrono::milliseconds(400));
  WarnLines warnings;
  std::mutex mu;
  std::condition_variable cv;
  bool saw_timeout = false, done = false;
  std::atomic<bool> logged{false};
  run_ranks(2, [&](Group& g) {
    if (g.rank() == 1) {  // never joins: rank 0's all_reduce times out
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return done; });
      return;
    }
    Tensor t = full({4}, 1.0, DType::Float32);
    Work w = all_reduce(t, g);
    w.then([&](Work failed) {
      try {
        failed.wait();
      } catch (const TimeoutError&) {
        std::lock_guard<std::mutex> lock(mu);
        saw_timeout = true;
      }
    });
    w.then([](Work) { throw std::runtime_error("callback bug"); });
    try {
      w.wait();
    } catch (const TimeoutError&) {
    }
    // The callbacks may run just after wait() returned: wait for the logged one (the last).
    logged = warnings.wait_for({"Work::then", "callback bug"}, std::chrono::seconds(30));
    std::lock_guard<std::mutex> lock(mu);
    done = true;
    cv.notify_all();
  });
  set_default_timeout(kDeadline);
  CHECK(saw_timeout);
  CHECK(logged);
}

TEST_CASE("launch environment: torchrun, SLURM, ferry-run and MPI variables", "[launch]") {
  auto read = [](std::map<std::string, std::string> env) {
    return detail::read_launch_environment([&](const char* name) -> const char* {
      auto it = env.find(name);
      return it == env.end() ? nullptr : it->second.c_str();
    });
  };
  LaunchEnvironment none = read({});
  CHECK(none.launcher.empty());
  CHECK(none.world_size == 1);

  LaunchEnvironment t = read({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"},
                              {"MASTER_ADDR", "node7"}, {"MASTER_PORT", "29500"}});
  CHECK(t.launcher == "torchrun");
  CHECK(t.rank == 3);
  CHECK(t.world_size == 4);
  CHECK(t.local_rank == 1);
  CHECK(t.host == "node7");
  CHECK(t.port == 29500);
  CHECK(t.describe() == "torchrun: rank 3 of 4 (local 1), rank 0 at node7:29500");
  // torchrun's agent holds MASTER_PORT with its own store: ferry takes the next port.
  CHECK(read({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"},
              {"TORCHELASTIC_USE_AGENT_STORE", "True"}}).port == 29501);

  LaunchEnvironment s = read({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"},
                              {"SLURM_LOCALID", "1"}, {"SLURM_STEP_NODELIST", "gpu[03-06,9],x1"},
                              {"MASTER_PORT", "12345"}});
  CHECK(s.launcher == "slurm");
  CHECK(s.rank == 5);
  CHECK(s.world_size == 8);
  CHECK(s.local_rank == 1);
  CHECK(s.host == "gpu03");
  CHECK(s.port == 12345);
  CHECK(read({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "a1,b2"},
              {"MASTER_ADDR", "login"}}).host == "login");  // MASTER_ADDR wins
  CHECK(detail::first_slurm_host("a1,b2") == "a1");
  CHECK(detail::first_slurm_host("n[1-2]") == "n1");
  CHECK(detail::first_slurm_host("solo") == "solo");

  // FERRY_* (ferry-run) first; FERRY_RENDEZVOUS names the address for any launcher.
  LaunchEnvironment f = read({{"FERRY_RANK", "1"}, {"FERRY_WORLD_SIZE", "2"},
                              {"FERRY_RENDEZVOUS", "127.0.0.1:4000"}, {"RANK", "0"},
                              {"WORLD_SIZE", "9"}});
  CHECK(f.launcher == "ferry");
  CHECK(f.rank == 1);
  CHECK(f.port == 4000);
  CHECK(read({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"FERRY_RENDEZVOUS", "[::1]:7"}}).host == "::1");

  LaunchEnvironment m = read({{"PMI_RANK", "1"}, {"PMI_SIZE", "3"}});
  CHECK(m.launcher == "mpi");
  CHECK(m.world_size == 3);

  CHECK_THROWS_WITH(read({{"RANK", "x"}, {"WORLD_SIZE", "2"}}),
                    Catch::Contains("RANK") && Catch::Contains("'x'"));
  CHECK_THROWS_WITH(read({{"RANK", "2"}, {"WORLD_SIZE", "2"}}), Catch::Contains("RANK"));
  CHECK_THROWS_WITH(read({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "99999"}}),
                    Catch::Contains("MASTER_PORT"));
}

TEST_CASE("rendezvous options: InitOptions' fields win over the environment", "[launch]") {
  const RendezvousOptions o = rendezvous_options({"10.0.0.1:5000", 1, 3, "s3cret", "0.0.0.0"});
  CHECK(o.host == "10.0.0.1");
  CHECK(o.port == 5000);
  CHECK(o.rank == 1);
  CHECK(o.size == 3);
  CHECK(o.secret == "s3cret");
  CHECK(o.bind == "0.0.0.0");
  CHECK_THROWS_WITH(rendezvous_options({"10.0.0.1:5000", 3, 3, "s", ""}),
                    Catch::Contains("InitOptions::rank"));
  CHECK_THROWS_WITH(rendezvous_options({"nowhere", 0, 2, "s", ""}),
                    Catch::Contains("InitOptions::rendezvous") && Catch::Contains("host:port"));
  if (std::getenv("FERRY_SECRET") == nullptr) {
    CHECK_THROWS_WITH(rendezvous_options({"h:1", 0, 2, "", ""}), Catch::Contains("FERRY_SECRET"));
  }
}

TEST_CASE("init(InitOptions): options are checked, then the world is made", "[launch]") {
  // The process's one init(): refused options leave it uninitialized, so the last call counts.
  InitOptions local_of_two;
  local_of_two.backend = "local";
  local_of_two.world_size = 2;
  CHECK_THROWS_WITH(init(local_of_two), Catch::Contains("only the ucx backend"));
  InitOptions mpi_with_rendezvous;
  mpi_with_rendezvous.backend = "mpi";
  mpi_with_rendezvous.rendezvous = "127.0.0.1:1";
  CHECK_THROWS_WITH(init(mpi_with_rendezvous), Catch::Contains("only the ucx backend"));
  InitOptions ok;
  ok.backend = "local";
  ok.timeout = std::chrono::milliseconds(45'000);
  Group world = init(ok);
  CHECK(world.size() == 1);
  CHECK(backend_name() == "local");
  CHECK(default_timeout() == std::chrono::milliseconds(45'000));
  set_default_timeout(kDeadline);
  const std::vector<std::string> t = available_transports();
  REQUIRE_FALSE(t.empty());
  CHECK(t.front() == "local");
  finalize();
}
