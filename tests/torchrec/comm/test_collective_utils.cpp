// torchrec collective utils: is_leader, invoke_on_rank_and_broadcast_result (group ranks as
// the source, on sub-groups too; failures reach every member), run_on_leader, and the serialization
// of results. Rank bodies record; Catch2 checks on the main thread.
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/run_ranks.h>
#include <ferry/collectives/torchrec/torchrec.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

using namespace ferry;
using namespace ferry::torchrec;
using Catch::Matchers::Contains;

namespace {

// A user type with its own form (not trivially copyable: a string and a vector inside).
struct Shard {
  std::string table;
  std::vector<int64_t> rows;
  double scale = 0;

  void serialize(ByteWriter& out) const {
    out.put(table);
    out.put(rows);
    out.put(scale);
  }
  static Shard deserialize(ByteReader& in) {
    Shard s;
    s.table = in.get<std::string>();
    s.rows = in.get<std::vector<int64_t>>();
    s.scale = in.get<double>();
    return s;
  }
  bool operator==(const Shard&) const = default;
};

struct Pod {
  int32_t a;
  double b;
  char c[3];
  bool operator==(const Pod& o) const {
    return a == o.a && b == o.b && c[0] == o.c[0] && c[1] == o.c[1] && c[2] == o.c[2];
  }
};

// Trivially copyable, but it chooses its own form (only `kept` travels).
struct Chooser {
  int kept = 0;
  int dropped = 0;
  void serialize(ByteWriter& out) const { out.put(kept); }
  static Chooser deserialize(ByteReader& in) { return Chooser{in.get<int>(), -1}; }
};

template <class T>
T round_trip(const T& v) {
  return deserialize<T>(serialize(v));
}

}  // namespace

static_assert(Serializable<int>);
static_assert(Serializable<Pod>);
static_assert(Serializable<std::string>);
static_assert(Serializable<std::vector<std::string>>);
static_assert(Serializable<std::vector<std::vector<float>>>);
static_assert(Serializable<Shard>);
static_assert(Serializable<std::vector<Shard>>);
static_assert(!Serializable<int*>);
static_assert(!Serializable<const char*>);
static_assert(!Serializable<std::vector<int*>>);
static_assert(!Serializable<std::map<int, int>>);

TEST_CASE("serialization: round trips", "[collective_utils][serialization]") {
  CHECK(round_trip(int64_t{-7}) == -7);
  CHECK(round_trip(2.5) == 2.5);
  CHECK(round_trip(Pod{1, 2.0, {'x', 'y', 'z'}}) == Pod{1, 2.0, {'x', 'y', 'z'}});
  const std::string with_nul("a\0b", 3);
  CHECK(round_trip(with_nul) == with_nul);
  CHECK(round_trip(std::string()).empty());
  CHECK(round_trip(std::vector<int64_t>{1, -2, 3}) == std::vector<int64_t>{1, -2, 3});
  CHECK(round_trip(std::vector<float>{}).empty());
  CHECK(round_trip(std::vector<bool>{true, false, true}) == std::vector<bool>{true, false, true});
  const std::vector<std::string> names{"t0", "", "table_two"};
  CHECK(round_trip(names) == names);
  const std::vector<std::vector<float>> nested{{1.f}, {}, {2.f, 3.f}};
  CHECK(round_trip(nested) == nested);
  const Shard s{"t1", {4, 5}, 0.5};
  CHECK(round_trip(s) == s);
  const std::vector<Shard> shards{s, Shard{"", {}, -1}};
  CHECK(round_trip(shards) == shards);
  // The user's form wins over the bytes of a trivially copyable type.
  const Chooser back = round_trip(Chooser{3, 9});
  CHECK(back.kept == 3);
  CHECK(back.dropped == -1);
  CHECK(serialize(Chooser{3, 9}).size() == sizeof(int));
  // Layout: a length, then the characters.
  CHECK(serialize(std::string("ab")).size() == sizeof(uint64_t) + 2);
}

TEST_CASE("serialization: bytes that do not match the type", "[collective_utils][serialization]") {
  CHECK_THROWS_AS(deserialize<int64_t>(serialize(int32_t{1})), MismatchError);
  CHECK_THROWS_AS(deserialize<int32_t>(serialize(int64_t{1})), MismatchError);  // bytes left
  std::vector<uint8_t> bad = serialize(std::string("abc"));
  bad[0] = 200;  // a length beyond the bytes
  CHECK_THROWS_WITH(deserialize<std::string>(bad), Contains("does not fit"));
  std::vector<uint8_t> bad_vec = serialize(std::vector<int64_t>{1, 2});
  bad_vec[7] = 1;  // a huge length: refused before allocating
  CHECK_THROWS_AS(deserialize<std::vector<int64_t>>(bad_vec), MismatchError);
}

TEST_CASE("collective utils: is_leader", "[collective_utils]") {
  CHECK(is_leader(Group()));
  CHECK(!is_leader(Group(), 1));
  std::vector<int> leader0(3), leader1(3);
  run_ranks(3, [&](Group& world) {
    leader0[static_cast<size_t>(world.rank())] = is_leader(world);
    leader1[static_cast<size_t>(world.rank())] = is_leader(world, 1);
  });
  CHECK(leader0 == std::vector<int>{1, 0, 0});
  CHECK(leader1 == std::vector<int>{0, 1, 0});
}

TEST_CASE("collective utils: a one-member group calls func without communicating", "[collective_utils]") {
  int calls = 0;
  uint64_t seq_before = 99, seq_after = 99;
  std::string got;
  run_ranks(1, [&](Group& world) {
    seq_before = world.sequence_number();
    got = invoke_on_rank_and_broadcast_result(world, 0, [&] {
      ++calls;
      return std::string("only");
    });
    seq_after = world.sequence_number();
  });
  CHECK(calls == 1);
  CHECK(got == "only");
  CHECK(seq_after == seq_before);
}

TEST_CASE("invoke_on_rank_and_broadcast_result on the world", "[collective_utils]") {
  std::atomic<int> calls{0};
  std::vector<int> callers(4, 0);
  std::vector<std::string> got(4);
  std::vector<Shard> shards(4);
  std::vector<int> sums(4);
  run_ranks(4, [&](Group& world) {
    const size_t me = static_cast<size_t>(world.rank());
    got[me] = invoke_on_rank_and_broadcast_result(world, 2, [&] {
      ++calls;
      callers[me] = 1;
      return "from world rank " + std::to_string(world.rank());
    });
    shards[me] = invoke_on_rank_and_broadcast_result(
        world, 3, [&](const std::string& name, int n) {
          return Shard{name, std::vector<int64_t>(static_cast<size_t>(n), world.rank()), 0.25};
        },
        std::string("emb"), 3);
    // run_on_leader: the decorator form, with arguments.
    auto add = run_on_leader(world, 0)([&](int a, int b) { return a + b + world.rank(); });
    sums[me] = add(1, 2);
  });
  CHECK(calls == 1);
  CHECK(callers == std::vector<int>{0, 0, 1, 0});
  for (size_t r = 0; r < 4; ++r) {
    INFO("rank " << r);
    CHECK(got[r] == "from world rank 2");
    CHECK(shards[r] == Shard{"emb", {3, 3, 3}, 0.25});
    CHECK(sums[r] == 3);  // computed on rank 0
  }
}

TEST_CASE("the source is a group rank on sub-groups", "[collective_utils]") {
  // World 4 split by parity: {0,2} and {1,3}; and one group in reverse order {3,2,1,0}.
  std::vector<int> by_parity(4), reversed(4), ran_parity(4), ran_reversed(4);
  run_ranks(4, [&](Group& world) {
    const int r = world.rank();
    const size_t me = static_cast<size_t>(r);
    Group parity = world.split(r % 2, r);
    by_parity[me] = invoke_on_rank_and_broadcast_result(parity, 1, [&] {
      ran_parity[me] = 1;
      return r;  // this process's world rank
    });
    Group reverse = world.split(0, -r);
    reversed[me] = invoke_on_rank_and_broadcast_result(reverse, 0, [&] {
      ran_reversed[me] = 1;
      return r;
    });
  });
  // Group rank 1 of {1,3} is world rank 3 (torchrec would take world rank 1 as the source),
  // group rank 1 of {0,2} is world rank 2; group rank 0 of the reversed group is world rank 3.
  CHECK(by_parity == std::vector<int>{2, 3, 2, 3});
  CHECK(ran_parity == std::vector<int>{0, 0, 1, 1});
  CHECK(reversed == std::vector<int>{3, 3, 3, 3});
  CHECK(ran_reversed == std::vector<int>{0, 0, 0, 1});
}

TEST_CASE("a failure on the source reaches every member", "[collective_utils][errors]") {
  struct Outcome {
    std::string kind, what;
    int after = -1;  // the next call on the same group still works
  };
  std::vector<Outcome> ferry_error(3), other_error(3), void_error(3);
  run_ranks(3, [&](Group& world) {
    const size_t me = static_cast<size_t>(world.rank());
    try {
      invoke_on_rank_and_broadcast_result(world, 2, []() -> int {
        throw InvalidArgument("no id left in the pool");
      });
      ferry_error[me].kind = "none";
    } catch (const InvalidArgument& e) {
      ferry_error[me].kind = "InvalidArgument";
      ferry_error[me].what = e.what();
    } catch (...) {
      ferry_error[me].kind = "other";
    }
    ferry_error[me].after = invoke_on_rank_and_broadcast_result(world, 2, [] { return 42; });

    try {
      invoke_on_rank_and_broadcast_result(world, 1, []() -> std::vector<std::string> {
        throw std::runtime_error("user failure");
      });
      other_error[me].kind = "none";
    } catch (const Error& e) {  // ferry::Error (not a std::runtime_error of the user's)
      other_error[me].kind = "ferry::Error";
      other_error[me].what = e.what();
    } catch (const std::runtime_error& e) {
      other_error[me].kind = "runtime_error";
      other_error[me].what = e.what();
    }

    try {
      invoke_on_rank_and_broadcast_result(world, 0, [] { throw TimeoutError("late"); });
      void_error[me].kind = "none";
    } catch (const TimeoutError& e) {
      void_error[me].kind = "TimeoutError";
      void_error[me].what = e.what();
    }
    // A void function that succeeds: every member returns.
    std::atomic<int> ran{0};
    invoke_on_rank_and_broadcast_result(world, 1, [&] { ++ran; });
    void_error[me].after = ran.load();
  });
  for (size_t r = 0; r < 3; ++r) {
    INFO("rank " << r);
    CHECK(ferry_error[r].kind == "InvalidArgument");
    CHECK_THAT(ferry_error[r].what, Contains("no id left in the pool"));
    CHECK(ferry_error[r].after == 42);
    CHECK(void_error[r].kind == "TimeoutError");
    CHECK_THAT(void_error[r].what, Contains("late"));
  }
  // Only the source ran the void function (each rank counts its own calls).
  CHECK(void_error[0].after == 0);
  CHECK(void_error[1].after == 1);
  CHECK(void_error[2].after == 0);
  // The source rethrows its own exception; the others name the source.
  CHECK(ferry_error[2].what == "no id left in the pool");
  CHECK_THAT(ferry_error[0].what, Contains("failed on the source, group rank 2 (world rank 2)"));
  CHECK(other_error[1].kind == "runtime_error");
  CHECK(other_error[1].what == "user failure");
  for (size_t r : {size_t{0}, size_t{2}}) {
    CHECK(other_error[r].kind == "ferry::Error");
    CHECK_THAT(other_error[r].what, Contains("user failure") && Contains("group rank 1"));
  }
}

TEST_CASE("invoke_on_rank_and_broadcast_result: bad arguments", "[collective_utils][errors]") {
  CHECK_THROWS_AS(invoke_on_rank_and_broadcast_result(Group(), 0, [] { return 1; }),
                  InvalidArgument);
  // A rank outside the group fails on every member before any data moves; the group stays
  // usable.
  std::vector<std::string> errors(3);
  std::vector<int> after(3);
  run_ranks(3, [&](Group& world) {
    const size_t me = static_cast<size_t>(world.rank());
    try {
      invoke_on_rank_and_broadcast_result(world, 3, [] { return 1; });
    } catch (const InvalidArgument& e) {
      errors[me] = e.what();
    }
    after[me] = invoke_on_rank_and_broadcast_result(world, 0, [] { return 5; });
  });
  for (size_t r = 0; r < 3; ++r) {
    CHECK_THAT(errors[r], Contains("source rank 3 is not a group rank in [0, 3)"));
    CHECK(after[r] == 5);
  }
}
