// The saving side of checkpoints: every rank writes its blocks to a file of its own (checked,
// fsync'ed, renamed), rank 0 gathers the ranks' parts of the metadata, writes it and commits the
// directory in one rename, then prunes the oldest.
#include "collectives/checkpoint/checkpoint.h"

#include "collectives/checkpoint/checkpoint_internal.h"
#include "collectives/checkpoint/crc32c.h"
#include "collectives/checkpoint/metadata.h"
#include "collectives/checkpoint/write_fault.h"

#include <ferry/collectives/collectives.h>
#include <ferry/runtime/error.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

namespace ferry::checkpoint {

namespace detail {
namespace {

std::atomic<int64_t> g_write_fault{-1};

class FileWriter {
 public:
  explicit FileWriter(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot create " + path_ + ": " + errno_text(errno));
  }
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;
  ~FileWriter() {
    if (fd_ >= 0) ::close(fd_);
  }

  void write(const void* data, size_t n) {
    const auto* p = static_cast<const char*>(data);
    while (n > 0) {
      size_t chunk = std::min<size_t>(n, size_t{8} << 20);
      // The injected fault: take what is left of the budget (ranks may be threads that share it).
      int64_t budget = g_write_fault.load();
      while (budget >= 0) {
        const auto take = std::min<int64_t>(static_cast<int64_t>(chunk), budget);
        if (g_write_fault.compare_exchange_weak(budget, budget - take)) {
          if (take == 0) failed(ENOSPC);
          chunk = static_cast<size_t>(take);
          break;
        }
      }
      const ssize_t w = ::write(fd_, p, chunk);
      if (w < 0) {
        if (errno == EINTR) continue;
        failed(errno);
      }
      if (w == 0) failed(EIO);
      p += w;
      n -= static_cast<size_t>(w);
      written_ += w;
    }
  }

  void pad_to(int64_t alignment) {
    static const char zeros[64] = {};
    while (written_ % alignment != 0)
      write(zeros, static_cast<size_t>(std::min<int64_t>(64, alignment - written_ % alignment)));
  }

  // fsync and close: the bytes are on disk when this returns.
  void finish() {
    if (::fsync(fd_) != 0) failed(errno);
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail("closing " + path_ + ": " + errno_text(errno));
  }

  int64_t written() const { return written_; }

 private:
  [[noreturn]] void failed(int e) {
    fail("writing " + path_ + " failed after " + std::to_string(written_) + " bytes: " +
         errno_text(e));
  }
  std::string path_;
  int fd_ = -1;
  int64_t written_ = 0;
};

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail("cannot open directory " + dir + ": " + errno_text(errno));
  const int rc = ::fsync(fd);
  const int e = errno;
  ::close(fd);
  if (rc != 0) fail("fsync of directory " + dir + ": " + errno_text(e));
}

void rename_or_fail(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0)
    fail("cannot rename " + from + " to " + to + ": " + errno_text(errno));
}

void remove_tree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) fail("cannot remove " + path + ": " + ec.message());
}

}  // namespace

void set_write_fault(int64_t bytes) { g_write_fault.store(bytes); }

}  // namespace detail

using namespace detail;

std::string save(const std::string& root, int64_t step, const std::vector<Block>& blocks,
                 const Record& record, const Group& group, const SaveOptions& options) {
  const int W = group.size(), me = group.rank();
  const std::string name = step_name(step);
  const std::string dir = root + "/" + name;
  const std::string staging = root + "/." + name + ".tmp";
  const std::string what = "checkpoint save " + dir;
  const std::string file_name = [me] {
    char buf[32];
    std::snprintf(buf, sizeof buf, "rank-%05d.bin", me);
    return std::string(buf);
  }();

  // This rank's part of the metadata: its file (index 0 here) and its blocks.
  Metadata mine;
  mine.step = std::max<int64_t>(step, 0);
  mine.world_size = W;
  agree(group, what, [&] {
    if (step < 0) fail("step " + std::to_string(step) + " is negative");
    if (options.keep < 1) fail("keep " + std::to_string(options.keep) + " must be >= 1");
    for (const auto& [k, v] : record.counters)
      if (!valid_name(k)) fail("counter name '" + k + "' is not a valid name");
    for (const auto& [k, v] : record.config)
      if (!valid_name(k) || !valid_value(v))
        fail("config '" + k + "' = '" + v + "': keys are names, values printable without spaces");
    for (const Block& b : blocks) {
      if (!valid_name(b.name)) fail("tensor name '" + b.name + "' is not a valid name");
      if (!b.data.defined()) fail("block of " + b.name + " has no data");
      const std::vector<int64_t> off =
          b.offsets.empty() ? std::vector<int64_t>(b.shape.size(), 0) : b.offsets;
      if (b.shape.size() > kMaxDims || off.size() != b.shape.size() ||
          static_cast<size_t>(b.data.dim()) != b.shape.size())
        fail("block of " + b.name + ": offsets " + shape_text(off) + " and data " +
             shape_text(b.data.shape()) + " do not match the shape " + shape_text(b.shape));
      for (size_t d = 0; d < b.shape.size(); ++d)
        if (off[d] < 0 || off[d] + b.data.size(static_cast<int64_t>(d)) > b.shape[d])
          fail("block of " + b.name + " at " + shape_text(off) + " of size " +
               shape_text(b.data.shape()) + " lies outside its shape " + shape_text(b.shape));
      auto [it, fresh] = mine.tensors.try_emplace(b.name);
      if (fresh) {
        it->second.dtype = b.data.dtype();
        it->second.shape = b.shape;
      } else if (it->second.dtype != b.data.dtype() || it->second.shape != b.shape) {
        fail("blocks of " + b.name + " disagree about its dtype or shape");
      }
    }
    if (me == 0) {
      std::error_code ec;
      std::filesystem::create_directories(root, ec);
      if (ec) fail("cannot create " + root + ": " + ec.message());
      remove_tree(staging);
      if (::mkdir(staging.c_str(), 0755) != 0)
        fail("cannot create " + staging + ": " + errno_text(errno));
      fsync_dir(root);
    }
  });

  // Every rank writes its file, in parallel.
  agree(group, what, [&] {
    const std::string path = staging + "/" + file_name;
    FileWriter f(path + ".tmp");
    char header[kDataHeaderBytes] = {'F', 'E', 'R', 'R', 'Y', 'C', 'K', 'D'};
    std::snprintf(header + 8, sizeof header - 8, " rank %d of %d step %lld", me, W,
                  static_cast<long long>(step));
    f.write(header, sizeof header);
    for (const Block& b : blocks) {
      if (b.data.numel() == 0) continue;
      f.pad_to(64);
      BlockEntry e;
      e.file = 0;
      e.offsets = b.offsets.empty() ? std::vector<int64_t>(b.shape.size(), 0) : b.offsets;
      e.sizes = b.data.shape();
      e.byte_offset = f.written();
      e.nbytes = static_cast<int64_t>(b.data.nbytes());
      // Checksum and write 8 MiB at a time: the write reads what the checksum just brought
      // into cache.
      const auto* bytes = static_cast<const char*>(b.data.raw_data());
      constexpr size_t kChunk = size_t{8} << 20;
      for (size_t at = 0; at < b.data.nbytes(); at += kChunk) {
        const size_t n = std::min(kChunk, b.data.nbytes() - at);
        e.crc = crc32c(e.crc, bytes + at, n);
        f.write(bytes + at, n);
      }
      mine.tensors[b.name].blocks.push_back(std::move(e));
    }
    mine.files.push_back({file_name, f.written()});
    f.finish();
    rename_or_fail(path + ".tmp", path);
  });

  // Rank 0 collects every rank's part.
  const std::string text = format_metadata(mine);
  Tensor bytes = empty({static_cast<int64_t>(text.size())}, DType::UInt8);
  std::memcpy(bytes.raw_data(), text.data(), text.size());
  Work gathered = all_gather_v(bytes, group);
  gathered.wait();

  agree(group, what, [&] {
    if (me != 0) return;
    Tensor all = gathered.output(0), sizes = gathered.output(1);
    Metadata m;
    m.step = step;
    m.world_size = W;
    m.counters = record.counters;
    m.config = record.config;
    const char* p = static_cast<const char*>(all.raw_data());
    for (int k = 0; k < W; ++k) {
      const auto n = static_cast<size_t>(sizes.get_flat(k));
      Metadata part = parse_metadata(std::string_view(p, n), "rank " + std::to_string(k) + "'s part",
                                     /*partial=*/true);
      p += n;
      if (part.files.size() != 1) fail("rank " + std::to_string(k) + " sent no file");
      m.files.push_back(part.files[0]);
      for (auto& [tname, t] : part.tensors) {
        auto [it, fresh] = m.tensors.try_emplace(tname);
        if (fresh) {
          it->second.dtype = t.dtype;
          it->second.shape = t.shape;
        } else if (it->second.dtype != t.dtype || it->second.shape != t.shape) {
          fail("ranks disagree about " + tname + ": " + dtype_name(it->second.dtype) + " " +
               shape_text(it->second.shape) + " and, on rank " + std::to_string(k) + ", " +
               dtype_name(t.dtype) + " " + shape_text(t.shape));
        }
        for (BlockEntry& b : t.blocks) {
          b.file = static_cast<size_t>(k);
          it->second.blocks.push_back(std::move(b));
        }
      }
    }
    const std::string meta_text = format_metadata(m);
    (void)parse_metadata(meta_text, dir + "/metadata");  // every tensor covered exactly once
    {
      FileWriter f(staging + "/metadata.tmp");
      f.write(meta_text.data(), meta_text.size());
      f.finish();
    }
    rename_or_fail(staging + "/metadata.tmp", staging + "/metadata");
    fsync_dir(staging);
    // The commit: the directory appears under its name in one rename. A step saved before is
    // swapped with the new one in one step too (RENAME_EXCHANGE), so that no instant shows
    // neither; where the file system cannot swap, it moves aside first.
    std::error_code ec;
    if (std::filesystem::exists(dir, ec)) {
      if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) {
        fsync_dir(root);
        remove_tree(staging);  // now the old one
      } else {
        const std::string old = root + "/." + name + ".old";
        remove_tree(old);
        rename_or_fail(dir, old);
        rename_or_fail(staging, dir);
        fsync_dir(root);
        remove_tree(old);
      }
    } else {
      rename_or_fail(staging, dir);
      fsync_dir(root);
    }
    // Keep the newest `keep`; stale temporaries of dead saves go too.
    const auto all_committed = committed(root);
    for (size_t i = 0; i + static_cast<size_t>(options.keep) < all_committed.size(); ++i)
      remove_tree(root + "/" + all_committed[i].second);
    std::filesystem::directory_iterator it(root, ec), end;
    std::vector<std::string> stale;
    for (; !ec && it != end; it.increment(ec)) {
      const std::string n = it->path().filename().string();
      if (n.size() > 6 && n[0] == '.' && step_of(n.substr(1, n.find('.', 1) - 1)) >= 0)
        stale.push_back(it->path().string());
    }
    for (const std::string& s : stale) remove_tree(s);
  });
  return dir;
}

}  // namespace ferry::checkpoint
