// Distributed checkpoints (collectives/checkpoint): CRC-32C; save and load on local worlds of
// 1-4 ranks with resharding (rows saved, columns loaded); keep-N; the collective commit under
// injected write failures at every point of a save (the previous checkpoint stays loadable);
// and the table of damaged and foreign files, each refused with the same clear error on every
// rank before anything is applied.
#include <ferry/collectives/checkpoint/checkpoint.h>
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/run_ranks.h>
#include <ferry/runtime/error.h>
#include "collectives/checkpoint/crc32c.h"
#include "collectives/checkpoint/metadata.h"
#include "collectives/checkpoint/write_fault.h"

#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace ferry;
namespace ck = ferry::checkpoint;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "ferry-ckpt-XXXXXX").string();
    REQUIRE(::mkdtemp(t.data()) != nullptr);
    path = t;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void spit(const std::string& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << s;
}

// Rewrites the metadata of checkpoint `dir` by `edit` and seals it with a fresh checksum, as a
// forger (or a bug) would: only the loader's own checks stand between it and the model.
void forge_metadata(const std::string& dir, const std::function<std::string(std::string)>& edit) {
  std::string text = slurp(dir + "/metadata");
  const size_t end = text.rfind("end ");
  std::string body = edit(text.substr(0, end));
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", ck::detail::crc32c(0, body.data(), body.size()));
  spit(dir + "/metadata", body + "end " + buf + "\n");
}

std::string replace_once(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  REQUIRE(at != std::string::npos);
  return s.replace(at, from.size(), to);
}

// The value of element (i, j) of test tensor "w" at step `step`.
float w_value(int64_t i, int64_t j, int step) { return static_cast<float>(100 * i + j + 0.25 * step); }

constexpr int64_t kRows = 10, kCols = 6;

// Rank r of W holds rows [r*kRows/W, (r+1)*kRows/W) of "w" (uneven), rank 0 also "b" and "d".
std::vector<ck::Block> blocks_of(int rank, int W, int step) {
  const int64_t lo = rank * kRows / W, hi = (rank + 1) * kRows / W;
  Tensor w = empty({hi - lo, kCols}, DType::Float32);
  for (int64_t i = lo; i < hi; ++i)
    for (int64_t j = 0; j < kCols; ++j) w.data<float>()[(i - lo) * kCols + j] = w_value(i, j, step);
  std::vector<ck::Block> out = {{"w", {kRows, kCols}, {lo, 0}, w}};
  if (rank == 0) {
    out.push_back({"b", {4}, {}, from_vector<int64_t>({step, -1, 2, 3})});
    out.push_back({"d", {3}, {}, from_vector<double>({0.5, std::nan(""), -2.0})});
  }
  return out;
}

ck::Record record_of(int64_t epochs_done) {
  ck::Record r;
  r.counters["epochs_done"] = epochs_done;
  r.config["model"] = "test";
  return r;
}

ck::Expectation expectation(int64_t max_epochs = 10) {
  ck::Expectation e;
  e.tensors = {{"w", {kRows, kCols}, DType::Float32},
               {"b", {4}, DType::Int64},
               {"d", {3}, DType::Float64}};
  e.counters = {{"epochs_done", 0, max_epochs}};
  e.config = {{"model", "test"}};
  return e;
}

void save_on(int W, const std::string& root, int step, int keep = 2) {
  run_ranks(W, [&](Group& g) {
    ck::save(root, step, blocks_of(g.rank(), W, step), record_of(step), g, {keep});
  });
}

// Loads on W ranks, each reading a column slice of "w" [kRows, its columns], and checks every
// value; returns the step read.
int load_and_check(int W, const std::string& path) {
  std::mutex m;
  int64_t step = -1;
  run_ranks(W, [&](Group& g) {
    const ck::Reader r = ck::Reader::open(path, expectation(), g);
    const int s = static_cast<int>(r.counter("epochs_done"));
    const int64_t c0 = g.rank() * kCols / W, c1 = (g.rank() + 1) * kCols / W;
    Tensor part = empty({kRows, c1 - c0}, DType::Float32);
    r.read_into("w", {0, c0}, part);
    for (int64_t i = 0; i < kRows; ++i)
      for (int64_t j = c0; j < c1; ++j)
        if (part.data<float>()[i * (c1 - c0) + (j - c0)] != w_value(i, j, s))
          throw std::runtime_error("wrong value at " + std::to_string(i) + "," + std::to_string(j));
    const Tensor b = r.read("b");
    if (b.to_vector<int64_t>() != std::vector<int64_t>{s, -1, 2, 3}) throw std::runtime_error("wrong b");
    const std::vector<double> d = r.read("d").to_vector<double>();
    if (d[0] != 0.5 || !std::isnan(d[1]) || d[2] != -2.0) throw std::runtime_error("wrong d");
    std::lock_guard lock(m);
    step = s;
  });
  return static_cast<int>(step);
}

// Runs `fn` on W ranks; returns each rank's error message ("" if it returned).
std::vector<std::string> errors_of(int W, const std::function<void(Group&)>& fn) {
  std::vector<std::string> out(static_cast<size_t>(W));
  run_ranks(W, [&](Group& g) {
    try {
      fn(g);
    } catch (const InvalidArgument& e) {
      out[static_cast<size_t>(g.rank())] = e.what();
    }
  });
  return out;
}

// Every rank raised the same InvalidArgument, containing each of `parts`.
void expect_same_error(const std::vector<std::string>& errors, const std::vector<std::string>& parts) {
  INFO("rank 0: " << errors[0]);
  REQUIRE_FALSE(errors[0].empty());
  for (const std::string& e : errors) CHECK(e == errors[0]);
  for (const std::string& p : parts) CHECK(errors[0].find(p) != std::string::npos);
}

std::vector<std::string> load_errors(int W, const std::string& path,
                                     const ck::Expectation& e = expectation()) {
  return errors_of(W, [&](Group& g) { (void)ck::Reader::open(path, e, g); });
}

}  // namespace

TEST_CASE("crc32c: the standard check value, hardware and table agree", "[checkpoint]") {
  CHECK(ck::detail::crc32c(0, "123456789", 9) == 0xE3069283u);
  CHECK(ck::detail::crc32c_portable(0, "123456789", 9) == 0xE3069283u);
  CHECK(ck::detail::crc32c(0, "", 0) == 0u);
  std::mt19937 gen(7);
  std::vector<unsigned char> data(4099);
  for (auto& c : data) c = static_cast<unsigned char>(gen());
  for (size_t off : {0, 1, 3, 7}) {
    for (size_t n : {0, 1, 7, 8, 9, 63, 64, 1000, 4090}) {
      const uint32_t hw = ck::detail::crc32c(0, data.data() + off, n);
      CHECK(hw == ck::detail::crc32c_portable(0, data.data() + off, n));
      // Continuation: two pieces give the checksum of the whole.
      const size_t half = n / 3;
      CHECK(ck::detail::crc32c(ck::detail::crc32c(0, data.data() + off, half),
                               data.data() + off + half, n - half) == hw);
    }
  }
}

TEST_CASE("checkpoint: saved by rows on W ranks, loaded by columns on any other W", "[checkpoint]") {
  for (int w_save : {1, 3, 4}) {
    for (int w_load : {1, 2, 3}) {
      TempDir t;
      save_on(w_save, t.path, 5);
      INFO("saved on " << w_save << ", loaded on " << w_load);
      CHECK(load_and_check(w_load, t.path) == 5);
      CHECK(load_and_check(w_load, t.path + "/ckpt-00000005") == 5);
    }
  }
}

TEST_CASE("checkpoint: NaN values are values, stored and loaded bit for bit", "[checkpoint]") {
  // A checkpoint stores what the model holds; NaN weights are the trainer's business (its loss
  // tells it), a changed bit is the checkpoint's (the checksum tells it).
  TempDir t;
  save_on(2, t.path, 1);
  CHECK(load_and_check(2, t.path) == 1);  // "d" holds a NaN and is checked as one
}

TEST_CASE("checkpoint: keep N, the newest wins, a step saved again is replaced", "[checkpoint]") {
  TempDir t;
  for (int step = 1; step <= 4; ++step) save_on(2, t.path, step);
  CHECK(!fs::exists(t.path + "/ckpt-00000001"));
  CHECK(!fs::exists(t.path + "/ckpt-00000002"));
  CHECK(fs::exists(t.path + "/ckpt-00000003/metadata"));
  CHECK(ck::latest(t.path) == t.path + "/ckpt-00000004");
  save_on(3, t.path, 4, 1);  // again, keep 1
  CHECK(!fs::exists(t.path + "/ckpt-00000003"));
  CHECK(load_and_check(2, t.path) == 4);
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(t.path)) {
    (void)e;
    ++entries;
  }
  CHECK(entries == 1);  // no temporaries left behind
}

TEST_CASE("checkpoint: a save that fails at any byte leaves the previous checkpoint", "[checkpoint]") {
  TempDir t;
  save_on(3, t.path, 1);
  // The bytes a whole save writes (3 rank files + metadata), measured.
  int64_t total = 0;
  for (const auto& e : fs::directory_iterator(t.path + "/ckpt-00000001")) total += static_cast<int64_t>(e.file_size());
  int failed = 0, committed = 0;
  for (int64_t budget = 0; budget <= total + 64; budget += 97) {
    TempDir u;
    save_on(3, u.path, 1);
    ck::detail::set_write_fault(budget);
    const std::vector<std::string> errors =
        errors_of(3, [&](Group& g) { ck::save(u.path, 2, blocks_of(g.rank(), 3, 2), record_of(2), g); });
    ck::detail::set_write_fault(-1);
    INFO("fault after " << budget << " bytes");
    if (errors[0].empty()) {
      for (const std::string& e : errors) CHECK(e.empty());
      ++committed;
      CHECK(load_and_check(2, u.path) == 2);
    } else {
      ++failed;
      expect_same_error(errors, {"checkpoint save", "No space left on device", "failed after"});
      CHECK(ck::latest(u.path) == u.path + "/ckpt-00000001");
      CHECK(load_and_check(2, u.path) == 1);
      // The next save goes through and clears the dead one's temporary directory.
      save_on(2, u.path, 3);
      CHECK(!fs::exists(u.path + "/.ckpt-00000002.tmp"));
      CHECK(load_and_check(3, u.path) == 3);
    }
  }
  CHECK(failed > 5);
  CHECK(committed >= 1);  // a budget above the total lets it through
}

TEST_CASE("checkpoint: agree makes one rank's error every rank's", "[checkpoint]") {
  const std::vector<std::string> errors = errors_of(4, [](Group& g) {
    ck::agree(g, "ferry: loading", [&] {
      if (g.rank() == 2) throw InvalidArgument("ferry: rank two's file is bad");
      if (g.rank() == 3) throw std::runtime_error("rank three too");
    });
  });
  expect_same_error(errors, {"loading: rank 2: rank two's file is bad"});
  CHECK(errors_of(3, [](Group& g) { ck::agree(g, "x", [] {}); }) == std::vector<std::string>(3));
}

TEST_CASE("checkpoint: damaged and foreign files are refused by every rank alike", "[checkpoint]") {
  TempDir t;
  save_on(2, t.path, 3);
  const std::string dir = t.path + "/ckpt-00000003";
  const std::string good = slurp(dir + "/metadata");
  const std::string data0 = slurp(dir + "/rank-00000.bin");
  const std::string data1 = slurp(dir + "/rank-00001.bin");
  auto restore = [&] {
    spit(dir + "/metadata", good);
    spit(dir + "/rank-00000.bin", data0);
    spit(dir + "/rank-00001.bin", data1);
  };
  const int W = 2;

  SECTION("not a checkpoint") {
    expect_same_error(load_errors(W, "/dev/null"), {"/dev/null is not a checkpoint directory"});
    expect_same_error(load_errors(W, t.path + "/nowhere"), {"nowhere does not exist"});
    TempDir empty_dir;
    expect_same_error(load_errors(W, empty_dir.path), {"holds no committed checkpoint"});
    spit(dir + "/metadata", "FDLRMCK1 something else entirely\n");
    expect_same_error(load_errors(W, dir), {"not a ferry checkpoint"});
  }
  SECTION("short metadata") {
    spit(dir + "/metadata", good.substr(0, good.size() / 2));
    expect_same_error(load_errors(W, t.path), {"metadata", "truncated"});
  }
  SECTION("short data file") {
    spit(dir + "/rank-00001.bin", data1.substr(0, data1.size() - 10));
    expect_same_error(load_errors(W, t.path),
                      {"rank-00001.bin is " + std::to_string(data1.size() - 10) + " bytes; the metadata says " +
                       std::to_string(data1.size())});
  }
  SECTION("huge length fields") {
    // Shapes and byte counts of 2^40 elements, sealed with a valid checksum: refused from the
    // file's length before anything is allocated.
    forge_metadata(dir, [](std::string s) {
      s = replace_once(s, "tensor w float32 10,6", "tensor w float32 1099511627776,6");
      return s;
    });
    expect_same_error(load_errors(W, t.path), {"cover", "of its 6597069766656 elements"});
    restore();
    forge_metadata(dir, [](std::string s) {
      s = replace_once(s, "tensor w float32 10,6", "tensor w float32 1099511627776,6");
      // Rank 0's block of w claims every row.
      const size_t at = s.find("block w 0 0,0 ");
      const size_t eol = s.find('\n', at);
      return s.replace(at, eol - at, "block w 0 0,0 1099511627776,6 64 26388279066624 00000000");
    });
    expect_same_error(load_errors(W, t.path), {"lies outside rank-00000.bin"});
    restore();
    forge_metadata(dir, [](std::string s) {
      return replace_once(s, "tensor w float32 10,6", "tensor w float32 99999999999999999999,6");
    });
    expect_same_error(load_errors(W, t.path), {"shape 99999999999999999999 is outside [0, 1099511627776]"});
  }
  SECTION("transposed shape") {
    ck::Expectation e = expectation();
    e.tensors[0].shape = {kCols, kRows};
    expect_same_error(load_errors(W, t.path, e),
                      {"tensor w", "expected shape [6, 10], the checkpoint has [10, 6]"});
    forge_metadata(dir, [](std::string s) { return replace_once(s, "tensor w float32 10,6", "tensor w float32 6,10"); });
    expect_same_error(load_errors(W, t.path), {"outside its shape [6, 10]"});
  }
  SECTION("dtype") {
    ck::Expectation e = expectation();
    e.tensors[0].dtype = DType::Float64;
    expect_same_error(load_errors(W, t.path, e), {"tensor w", "expected dtype float64, the checkpoint has float32"});
    forge_metadata(dir, [](std::string s) { return replace_once(s, "tensor w float32", "tensor w int32"); });
    expect_same_error(load_errors(W, t.path), {"expected dtype float32, the checkpoint has int32"});
  }
  SECTION("a flipped bit in a block") {
    for (const std::string file : {"rank-00000.bin", "rank-00001.bin"}) {
      std::string d = file == "rank-00000.bin" ? data0 : data1;
      d[70] = static_cast<char>(d[70] ^ 0x10);  // inside w's block, which starts at byte 64
      spit(dir + "/" + file, d);
      expect_same_error(load_errors(W, t.path), {"tensor w", file, "checksum mismatch"});
      restore();
    }
  }
  SECTION("a flipped bit in the metadata") {
    std::string m = good;
    m[m.find("world_size") + 1] ^= 0x01;
    spit(dir + "/metadata", m);
    expect_same_error(load_errors(W, t.path), {"metadata checksum mismatch"});
  }
  SECTION("counters out of range, config, tensors missing or extra") {
    forge_metadata(dir, [](std::string s) { return replace_once(s, "counter epochs_done 3", "counter epochs_done 1000"); });
    expect_same_error(load_errors(W, t.path), {"counter epochs_done", "is 1000, expected within [0, 10]"});
    forge_metadata(dir, [](std::string s) { return replace_once(s, "counter epochs_done 1000", "counter epochs_done -3"); });
    expect_same_error(load_errors(W, t.path), {"is -3, expected within [0, 10]"});
    restore();
    ck::Expectation e = expectation();
    e.config["model"] = "other";
    expect_same_error(load_errors(W, t.path, e), {"config model", "is 'test', this program has 'other'"});
    e = expectation();
    e.tensors.push_back({"missing", {1}, DType::Float32});
    expect_same_error(load_errors(W, t.path, e), {"has no tensor missing"});
    e.tensors.back().required = false;
    CHECK(load_errors(W, t.path, e) == std::vector<std::string>(2));
    e = expectation();
    e.tensors.pop_back();
    expect_same_error(load_errors(W, t.path, e), {"holds tensor d, which this program does not have"});
    e.unchecked_prefixes = {"x", "d"};  // "d" present, any shape: the caller's to check
    CHECK(load_errors(W, t.path, e) == std::vector<std::string>(2));
    run_ranks(1, [&](Group& g) {
      const ck::Reader r = ck::Reader::open(t.path, e, g);
      CHECK(r.names() == std::vector<std::string>{"b", "d", "w"});
      CHECK(r.has("d"));
      CHECK_FALSE(r.has("x"));
    });
  }
  SECTION("overlapping or missing blocks") {
    forge_metadata(dir, [](std::string s) {
      const size_t at = s.find("block w 1 ");
      return s.erase(at, s.find('\n', at) + 1 - at);
    });
    expect_same_error(load_errors(W, t.path), {"the blocks of w cover 30 of its 60 elements"});
    restore();
    forge_metadata(dir, [](std::string s) { return replace_once(s, "block w 1 5,0", "block w 1 4,0"); });
    expect_same_error(load_errors(W, t.path), {"blocks of w at [0, 0] and [4, 0] overlap"});
  }
  restore();
  CHECK(load_and_check(3, t.path) == 3);
}

TEST_CASE("checkpoint: bad blocks are refused before anything is written", "[checkpoint]") {
  TempDir t;
  auto save_errors = [&](std::vector<ck::Block> blocks) {
    return errors_of(2, [&](Group& g) {
      ck::save(t.path, 1, g.rank() == 1 ? blocks : std::vector<ck::Block>{}, record_of(1), g);
    });
  };
  expect_same_error(save_errors({{"w", {2, 3}, {1, 0}, zeros({2, 3})}}),
                    {"rank 1: ", "block of w at [1, 0] of size [2, 3] lies outside its shape [2, 3]"});
  expect_same_error(save_errors({{"bad name", {1}, {}, zeros({1})}}), {"'bad name' is not a valid name"});
  expect_same_error(save_errors({{"w", {4}, {}, zeros({2})}}), {"the blocks of w cover 2 of its 4 elements"});
  CHECK(ck::latest(t.path).empty());
}

TEST_CASE("checkpoint metadata: strict parsing", "[checkpoint]") {
  using ck::detail::parse_metadata;
  ck::detail::Metadata m;
  m.step = 7;
  m.world_size = 1;
  m.files = {{"rank-00000.bin", 64 + 24}};
  m.counters["c"] = -5;
  m.config["k"] = "v,1";
  m.tensors["t"] = {DType::Float32, {2, 3}, {{0, {0, 0}, {2, 3}, 64, 24, 0xdeadbeef}}};
  const std::string text = ck::detail::format_metadata(m);
  const ck::detail::Metadata back = parse_metadata(text, "x");
  CHECK(ck::detail::format_metadata(back) == text);
  CHECK(back.counters.at("c") == -5);
  auto reseal = [](std::string body) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%08x", ck::detail::crc32c(0, body.data(), body.size()));
    return body + "end " + buf + "\n";
  };
  const std::string body = text.substr(0, text.rfind("end "));
  const std::vector<std::pair<std::string, std::string>> bad = {
      {replace_once(body, "step 7", "step 0x7"), "step is not a number"},
      {replace_once(body, "step 7", "step +7"), "step is not a number"},
      {replace_once(body, "step 7", "step 7 "), "empty field"},
      {body + "bogus 1\n", "unknown line kind 'bogus'"},
      {body + "step 8\n", "a second \"step\""},
      {replace_once(body, "deadbeef", "DEADBEEF"), "lowercase hex"},
      {replace_once(body, "64 24", "64 28"), "says 28 bytes"},
      {replace_once(body, "rank-00000.bin 88", "rank-00000.bin 80"), "lies outside rank-00000.bin of 80 bytes"},
      {replace_once(body, "block t 0", "block t 1"), "names file 1 of 1"},
      {replace_once(body, "float32", "float"), "dtype 'float' is not a canonical name"},
      {replace_once(body, "float32 2,3", "float32 2,3,1,1,1,1,1,1,1"), "more than 8 dimensions"},
      {replace_once(body, "step 7", "step 99999999999999999999"), "step 99999999999999999999 is outside"},
      {body + std::string(5000, 'x') + "\n", "longer than 4096 bytes"},
  };
  for (const auto& [t, want] : bad) {
    INFO(want);
    try {
      (void)parse_metadata(reseal(t), "x");
      FAIL("accepted");
    } catch (const InvalidArgument& e) {
      CHECK(std::string(e.what()).find(want) != std::string::npos);
    }
  }
}
