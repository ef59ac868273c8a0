// A thread's idle work (idle_work.h): runs only on the thread that registered it, one piece per
// call, never inside itself; an empty function removes it; a piece that throws removes it.
#include <ferry/runtime/idle_work.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <stdexcept>
#include <thread>

using ferry::detail::run_idle_work;
using ferry::detail::set_idle_work;

TEST_CASE("idle work: per thread, one piece per call, not reentrant, removable", "[idle_work]") {
  CHECK_FALSE(run_idle_work());  // none registered
  int pieces = 0;
  bool nested = true;
  set_idle_work([&] {
    ++pieces;
    nested = run_idle_work();  // a piece never runs inside another
    return pieces < 3;
  });
  CHECK(run_idle_work());
  CHECK_FALSE(nested);
  CHECK(run_idle_work());
  CHECK_FALSE(run_idle_work());  // the third piece says nothing is left
  CHECK(pieces == 3);
  bool other_thread_ran = true;
  std::thread([&] { other_thread_ran = run_idle_work(); }).join();
  CHECK_FALSE(other_thread_ran);
  CHECK(pieces == 3);
  set_idle_work({});
  CHECK_FALSE(run_idle_work());
  CHECK(pieces == 3);
}

TEST_CASE("idle work: an owner removes only the work it registered", "[idle_work]") {
  int a = 0, b = 0;
  set_idle_work([&] { return ++a < 100; }, &a);
  CHECK(ferry::detail::idle_work_registered_by(&a));
  set_idle_work([&] { return ++b < 100; }, &b);
  CHECK_FALSE(ferry::detail::idle_work_registered_by(&a));
  ferry::detail::clear_idle_work(&a);  // not a's any more: stays
  CHECK(run_idle_work());
  CHECK(b == 1);
  ferry::detail::clear_idle_work(&b);
  CHECK_FALSE(run_idle_work());
  CHECK(a == 0);
}

TEST_CASE("idle work: a piece that throws passes the exception on and is removed", "[idle_work]") {
  set_idle_work([]() -> bool { throw std::runtime_error("piece failed"); });
  CHECK_THROWS_WITH(run_idle_work(), "piece failed");
  CHECK_FALSE(run_idle_work());
}

// A thread's thread_locals are destroyed in the reverse order of their making. A wait from the
// destructor of one made before the registration (as finalize() running from an exit handler,
// after glibc destroyed the main thread's thread_locals) finds no idle work and runs none.
TEST_CASE("idle work: none runs once the thread's registration is destroyed", "[idle_work]") {
  static std::atomic<int> pieces{0};
  static std::atomic<int> after_exit{-1};  // what run_idle_work answered from the destructor
  struct Probe {
    ~Probe() { after_exit = run_idle_work() ? 1 : 0; }
  };
  bool ran_while_alive = false;
  std::thread([&] {
    thread_local Probe probe;  // made before the registration: destroyed after it
    (void)&probe;
    set_idle_work([] {
      ++pieces;
      return true;
    });
    ran_while_alive = run_idle_work();
  }).join();
  CHECK(ran_while_alive);
  CHECK(pieces == 1);
  CHECK(after_exit == 0);
}
