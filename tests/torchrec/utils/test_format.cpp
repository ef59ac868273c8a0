// The text pieces of torchrec's messages (utils/format.h): lists with and without a limit, the
// plans' compact rank lists, quoted keys, where an op ran, and the vector sum.
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/run_ranks.h>
#include <ferry/collectives/torchrec/utils/format.h>

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace ferry;
using namespace ferry::torchrec::detail;

TEST_CASE("format: list_str keeps `limit` entries and counts the rest", "[format]") {
  CHECK(list_str({}) == "[]");
  CHECK(list_str({1, -2, 3}) == "[1, -2, 3]");
  CHECK(list_str({1, 2, 3, 4}, 2) == "[1, 2, ... (4 entries)]");
  std::vector<int64_t> many(20, 7);
  CHECK(list_str(many).find("... (20 entries)") != std::string::npos);
  CHECK(list_str(many, kEveryEntry).find("...") == std::string::npos);
}

TEST_CASE("format: compact rank lists, quoted keys, sums", "[format]") {
  CHECK(compact_list_str({}) == "[]");
  CHECK(compact_list_str({0, 2, 3}) == "[0,2,3]");
  CHECK(keys_str({"a", "b"}) == "[\"a\", \"b\"]");
  CHECK(keys_str({"a", "b", "c"}, 1) == "[\"a\", ... (3 keys)]");
  CHECK(sum_of({}) == 0);
  CHECK(sum_of({4, -1, 5}) == 8);
}

TEST_CASE("format: where names the op, the rank, the group and its size", "[format]") {
  std::vector<std::string> seen(2);
  run_ranks(2, [&](Group& world) {
    seen[static_cast<size_t>(world.rank())] = where("alltoall_pooled", world);
  });
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    const std::string& s = seen[static_cast<size_t>(r)];
    CHECK(s.rfind("alltoall_pooled on rank " + std::to_string(r) + " of group ", 0) == 0);
    CHECK(s.find("(size 2)") != std::string::npos);
  }
}
