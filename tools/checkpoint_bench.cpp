// ferry-checkpoint-bench: what a distributed checkpoint costs on this disk, against plain file
// I/O of the same bytes in the same run.
//
// Each rank holds a block of rows of one float32 tensor (--mib-per-rank MiB). Per round:
//   save        ferry::checkpoint::save: its own file (CRC-32C, checked writes, fsync), the
//               collective commit (metadata, renames, directory fsyncs), keep 2;
//   raw write   the same bytes written to a plain file in 8 MiB write() calls, then fsync
//               (what `dd bs=8M conv=fsync` does);
//   open        Reader::open: the metadata checks and every block's CRC-32C, ranks taking turns;
//   load        read_into of this rank's own rows (the plan that saved it: one block, straight
//               into the tensor, its CRC-32C again);
//   raw read    the plain file read back with pread in 8 MiB calls;
//   reshard     read_into of a column slice (all rows, 1/W of the columns: every rank reads
//               every block), checked against what was saved.
// Times are the slowest rank's; GB/s are per rank (bytes of its own block / time). The two
// writes alternate which goes first. Reads come from the page cache (nothing here drops it).
// The host's I/O swings between runs: compare the ratios within one run.
#include <ferry/ferry.h>
#include "tools/cli/args.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace {

using namespace ferry;
using Clock = std::chrono::steady_clock;

struct Options {
  int world_size = 2;
  int64_t mib = 256;
  int iters = 3;
  std::string dir = "ferry-checkpoint-bench";
};

// The slowest rank's time of `body`, every rank starting together.
double timed(const Group& g, const std::function<void()>& body) {
  barrier(g).wait();
  const auto t0 = Clock::now();
  body();
  Tensor t = full({1}, std::chrono::duration<double>(Clock::now() - t0).count(), DType::Float64);
  all_reduce(t, g, ReduceOp::Max).wait();
  return t.item();
}

void raw_write(const std::string& path, const char* p, size_t n) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("ferry-checkpoint-bench: cannot create " + path);
  for (size_t at = 0; at < n;) {
    const ssize_t w = ::write(fd, p + at, std::min<size_t>(n - at, size_t{8} << 20));
    if (w <= 0) throw Error("ferry-checkpoint-bench: write to " + path + " failed");
    at += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) throw Error("ferry-checkpoint-bench: fsync failed");
}

void raw_read(const std::string& path, char* p, size_t n) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error("ferry-checkpoint-bench: cannot read " + path);
  for (size_t at = 0; at < n;) {
    const ssize_t r = ::pread(fd, p + at, std::min<size_t>(n - at, size_t{8} << 20),
                              static_cast<off_t>(at));
    if (r <= 0) throw Error("ferry-checkpoint-bench: read of " + path + " failed");
    at += static_cast<size_t>(r);
  }
  ::close(fd);
}

void run(const Options& o, const Group& g, bool print) {
  const int W = g.size(), r = g.rank();
  constexpr int64_t kCols = 1024;
  const int64_t rows = std::max<int64_t>(1, o.mib * 1024 * 1024 / (kCols * 4));
  Tensor mine = empty({rows, kCols}, DType::Float32);
  float* p = mine.data<float>();
  for (int64_t i = 0; i < rows * kCols; ++i)
    p[i] = static_cast<float>((static_cast<uint64_t>(i) * 2654435761u + static_cast<uint64_t>(r)) % 1000003);
  const size_t nbytes = mine.nbytes();
  const double gb = static_cast<double>(nbytes) / 1e9;
  const Shape shape = {rows * W, kCols};
  const int64_t c0 = r * kCols / W, c1 = (r + 1) * kCols / W;
  Tensor own = empty({rows, kCols}, DType::Float32);
  Tensor slice = empty({rows * W, c1 - c0}, DType::Float32);
  std::vector<char> scratch(nbytes);
  const std::string raw = o.dir + "/raw-" + std::to_string(r) + ".bin";
  if (r == 0) std::filesystem::create_directories(o.dir);
  barrier(g).wait();
  checkpoint::Expectation expect;
  expect.tensors = {{"w", shape, DType::Float32}};
  if (print)
    std::printf("ferry-checkpoint-bench: %d ranks, %lld MiB per rank, under %s (GB/s per rank)\n"
                "%5s %14s %14s %9s %14s %14s %14s %8s %8s\n",
                W, static_cast<long long>(o.mib), o.dir.c_str(), "round", "save", "raw write",
                "open s", "load", "raw read", "reshard", "save/raw", "load/raw");
  for (int it = 0; it < o.iters; ++it) {
    // Which write goes first alternates: the disk's write-back of one slows the other.
    double save_s = 0, raw_w = 0;
    auto save = [&] {
      save_s = timed(g, [&] { checkpoint::save(o.dir, it, {{"w", shape, {rows * r, 0}, mine}}, {}, g); });
    };
    auto plain = [&] {
      raw_w = timed(g, [&] { raw_write(raw, static_cast<const char*>(mine.raw_data()), nbytes); });
    };
    if (it % 2 == 0) {
      save();
      plain();
    } else {
      plain();
      save();
    }
    std::optional<checkpoint::Reader> reader;
    const double open_s = timed(g, [&] { reader.emplace(checkpoint::Reader::open(o.dir, expect, g)); });
    const double load_s = timed(g, [&] { reader->read_into("w", {rows * r, 0}, own); });
    const double raw_r = timed(g, [&] { raw_read(raw, scratch.data(), nbytes); });
    const double reshard_s = timed(g, [&] { reader->read_into("w", {0, c0}, slice); });
    for (int64_t i = 0; i < rows; i += 997) {
      for (int64_t j = c0; j < c1; j += 31) {
        if (slice.data<float>()[(rows * r + i) * (c1 - c0) + (j - c0)] != p[i * kCols + j] ||
            own.data<float>()[i * kCols + j] != p[i * kCols + j])
          throw Error("ferry-checkpoint-bench: a value read back differs");
      }
    }
    if (print)
      std::printf("%5d %6.2f (%4.2fs) %6.2f (%4.2fs) %9.3f %6.2f (%4.2fs) %6.2f (%4.2fs) %6.2f (%4.2fs) %8.2f %8.2f\n",
                  it, gb / save_s, save_s, gb / raw_w, raw_w, open_s, gb / load_s, load_s,
                  gb / raw_r, raw_r, gb / reshard_s, reshard_s, raw_w / save_s, raw_r / load_s);
  }
  std::error_code ec;
  std::filesystem::remove(raw, ec);
}

}  // namespace

int main(int argc, char** argv) {
  return cli::guarded_main("ferry-checkpoint-bench", [&] {
    Options o;
    cli::Parser("ferry-checkpoint-bench", "[options]",
                "Save and load throughput of ferry::checkpoint per rank, against plain write +\n"
                "fsync and pread of the same bytes in the same run.")
        .int_option("-n, --world-size", "ranks of the local transport (default 2)", &o.world_size,
                    1, 64)
        .int_option("--mib-per-rank", "MiB each rank saves (default 256)", &o.mib, 1, 1 << 20)
        .int_option("--iters", "rounds (default 3)", &o.iters, 1, 1000)
        .string_option("--dir", "where to write (default ./ferry-checkpoint-bench; removed after)",
                       &o.dir, "DIR")
        .parse(argc, argv);
    Group launched = init();
    if (launched.size() > 1) {
      run(o, launched, launched.rank() == 0);
      barrier(launched).wait();
    } else {
      run_ranks(o.world_size, [&](Group& g) { run(o, g, g.rank() == 0); });
    }
    if (launched.rank() == 0) {
      std::error_code ec;
      std::filesystem::remove_all(o.dir, ec);
    }
    finalize();
    return 0;
  });
}
