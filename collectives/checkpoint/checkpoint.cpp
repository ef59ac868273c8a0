#include "collectives/checkpoint/checkpoint.h"

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
#include <set>
#include <utility>

namespace ferry::checkpoint {

struct Reader::State {
  std::string dir;
  detail::Metadata meta;
  std::vector<std::string> paths;  // meta.files, full paths
};

namespace detail {
namespace {

std::atomic<int64_t> g_write_fault{-1};

std::string errno_text(int e) { return std::strerror(e); }

// Strips "ferry: " from a nested message, so that a message says it once.
std::string inner(const std::string& m) { return m.rfind("ferry: ", 0) == 0 ? m.substr(7) : m; }

[[noreturn]] void fail(const std::string& what) { throw InvalidArgument("ferry: " + what); }

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

class FileReader {
 public:
  explicit FileReader(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) fail("cannot read " + path_ + ": " + errno_text(errno));
  }
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;
  ~FileReader() { ::close(fd_); }

  int64_t size() const {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) fail("cannot stat " + path_ + ": " + errno_text(errno));
    if (!S_ISREG(st.st_mode)) fail(path_ + " is not a regular file");
    return static_cast<int64_t>(st.st_size);
  }

  void read_at(void* dst, size_t n, int64_t offset) const {
    auto* p = static_cast<char*>(dst);
    while (n > 0) {
      const ssize_t r = ::pread(fd_, p, std::min<size_t>(n, size_t{1} << 30), offset);
      if (r < 0) {
        if (errno == EINTR) continue;
        fail("reading " + path_ + ": " + errno_text(errno));
      }
      if (r == 0) fail(path_ + " ended early (truncated while being read?)");
      p += r;
      n -= static_cast<size_t>(r);
      offset += r;
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
};

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "ckpt-%08lld", static_cast<long long>(step));
  return buf;
}

// "ckpt-<digits>" -> the step, or -1.
int64_t step_of(const std::string& name) {
  if (name.rfind("ckpt-", 0) != 0 || name.size() <= 5 || name.size() > 5 + 19) return -1;
  int64_t v = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, name[i] - '0', &v))
      return -1;
  }
  return v;
}

// Committed checkpoints under root: (step, name), oldest first.
std::vector<std::pair<int64_t, std::string>> committed(const std::string& root) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  std::filesystem::directory_iterator it(root, ec), end;
  if (ec) return out;
  for (; it != end; it.increment(ec)) {
    if (ec) break;
    const std::string name = it->path().filename().string();
    const int64_t step = step_of(name);
    if (step < 0) continue;
    std::error_code e2;
    if (std::filesystem::is_regular_file(it->path() / "metadata", e2))
      out.emplace_back(step, name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Broadcasts a string from root (every rank gets root's).
std::string broadcast_string(const Group& group, int root, const std::string& s) {
  Tensor len = full({1}, group.rank() == root ? static_cast<double>(s.size()) : 0.0, DType::Int64);
  broadcast(len, root, group).wait();
  const auto n = static_cast<int64_t>(len.item());
  if (n <= 0) return "";
  Tensor bytes = empty({n}, DType::UInt8);
  if (group.rank() == root) std::memcpy(bytes.raw_data(), s.data(), static_cast<size_t>(n));
  broadcast(bytes, root, group).wait();
  return std::string(static_cast<const char*>(bytes.raw_data()), static_cast<size_t>(n));
}

std::string read_metadata_text(const std::string& path) {
  FileReader f(path);
  const int64_t size = f.size();
  if (size > static_cast<int64_t>(kMaxMetadataBytes))
    fail(path + " is " + std::to_string(size) + " bytes, more than the " +
         std::to_string(kMaxMetadataBytes) + " a checkpoint's metadata may have");
  std::string text(static_cast<size_t>(size), '\0');
  f.read_at(text.data(), text.size(), 0);
  return text;
}

// The element range [lo, hi) of a box, per dimension.
struct Box {
  std::vector<int64_t> lo, hi;
};

// Copies the elements of `overlap` from a row-major block `src` (box `sb`) into a row-major
// `dst` (box `db`). elem: bytes per element.
void copy_box(const char* src, const Box& sb, char* dst, const Box& db, const Box& overlap,
              size_t elem) {
  const size_t nd = overlap.lo.size();
  if (nd == 0) {
    std::memcpy(dst, src, elem);
    return;
  }
  std::vector<int64_t> sstride(nd), dstride(nd);
  sstride[nd - 1] = dstride[nd - 1] = 1;
  for (size_t d = nd - 1; d-- > 0;) {
    sstride[d] = sstride[d + 1] * (sb.hi[d + 1] - sb.lo[d + 1]);
    dstride[d] = dstride[d + 1] * (db.hi[d + 1] - db.lo[d + 1]);
  }
  const size_t run = static_cast<size_t>(overlap.hi[nd - 1] - overlap.lo[nd - 1]) * elem;
  std::vector<int64_t> idx(overlap.lo);
  while (true) {
    int64_t so = 0, doff = 0;
    for (size_t d = 0; d < nd; ++d) {
      so += (idx[d] - sb.lo[d]) * sstride[d];
      doff += (idx[d] - db.lo[d]) * dstride[d];
    }
    std::memcpy(dst + doff * static_cast<int64_t>(elem), src + so * static_cast<int64_t>(elem), run);
    // Next index over dims 0..nd-2 (odometer).
    size_t d = nd - 1;
    while (d > 0) {
      --d;
      if (++idx[d] < overlap.hi[d]) break;
      idx[d] = overlap.lo[d];
      if (d == 0) return;
    }
    if (nd == 1) return;
  }
}

uint32_t crc_of_range(const FileReader& f, int64_t offset, int64_t nbytes) {
  constexpr size_t kChunk = size_t{4} << 20;
  std::vector<char> buf(static_cast<size_t>(std::min<int64_t>(nbytes, kChunk)));
  uint32_t crc = 0;
  while (nbytes > 0) {
    const size_t n = static_cast<size_t>(std::min<int64_t>(nbytes, kChunk));
    f.read_at(buf.data(), n, offset);
    crc = crc32c(crc, buf.data(), n);
    offset += static_cast<int64_t>(n);
    nbytes -= static_cast<int64_t>(n);
  }
  return crc;
}

std::string hex32(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

}  // namespace

void set_write_fault(int64_t bytes) { g_write_fault.store(bytes); }

}  // namespace detail

using namespace detail;

void agree(const Group& group, const std::string& what, const std::function<void()>& fn) {
  std::string message;
  bool failed = false;
  try {
    fn();
  } catch (const TimeoutError&) {
    throw;
  } catch (const PeerFailure&) {
    throw;
  } catch (const TransportError&) {
    throw;
  } catch (const MismatchError&) {
    throw;
  } catch (const std::exception& e) {
    failed = true;
    message = inner(e.what());
  } catch (...) {
    failed = true;
    message = "unknown exception";
  }
  const int W = group.size();
  Tensor first = full({1}, failed ? group.rank() : W, DType::Int64);
  all_reduce(first, group, ReduceOp::Min).wait();
  const int r = static_cast<int>(first.item());
  if (r >= W) return;
  if (message.size() > 16384) message.resize(16384);
  const std::string shared = broadcast_string(group, r, message);
  std::string where = inner(what);
  throw InvalidArgument("ferry: " + where + ": rank " + std::to_string(r) + ": " + shared);
}

std::string latest(const std::string& root) {
  const auto c = committed(root);
  return c.empty() ? std::string() : root + "/" + c.back().second;
}

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

Reader Reader::open(const std::string& path, const Expectation& expect, const Group& group) {
  // Rank 0 chooses the checkpoint, for everyone.
  std::string dir;
  agree(group, "checkpoint load " + path, [&] {
    if (group.rank() != 0) return;
    std::error_code ec;
    if (std::filesystem::is_regular_file(path + "/metadata", ec)) {
      dir = path;
    } else if (std::filesystem::is_directory(path, ec)) {
      dir = latest(path);
      if (dir.empty()) fail(path + " holds no committed checkpoint (no ckpt-N/metadata)");
    } else if (std::filesystem::exists(path, ec)) {
      fail(path + " is not a checkpoint directory");
    } else {
      fail(path + " does not exist");
    }
  });
  dir = broadcast_string(group, 0, dir);

  auto state = std::make_shared<State>();
  state->dir = dir;
  agree(group, "checkpoint load " + dir, [&] {
    const std::string meta_path = dir + "/metadata";
    state->meta = parse_metadata(read_metadata_text(meta_path), meta_path);
    const Metadata& m = state->meta;
    for (const FileEntry& f : m.files) {
      const std::string p = dir + "/" + f.name;
      if (f.name.find('/') != std::string::npos) fail(meta_path + " names a file outside " + dir);
      const int64_t size = FileReader(p).size();
      if (size != f.size)
        fail(p + " is " + std::to_string(size) + " bytes; the metadata says " +
             std::to_string(f.size) + " (truncated or replaced)");
      state->paths.push_back(p);
    }
    // The running program's expectations.
    // The model first: another model's checkpoint is named as such, not by its first tensor.
    for (const auto& [k, v] : expect.config) {
      auto it = m.config.find(k);
      if (it == m.config.end()) fail(meta_path + " has no config " + k + " (expected " + v + ")");
      if (it->second != v)
        fail("config " + k + " in " + meta_path + " is '" + it->second + "', this program has '" +
             v + "'");
    }
    std::set<std::string> listed;
    for (const TensorSpec& s : expect.tensors) {
      listed.insert(s.name);
      auto it = m.tensors.find(s.name);
      if (it == m.tensors.end()) {
        if (s.required) fail(meta_path + " has no tensor " + s.name);
        continue;
      }
      if (it->second.dtype != s.dtype)
        fail("tensor " + s.name + " in " + meta_path + ": expected dtype " + dtype_name(s.dtype) +
             ", the checkpoint has " + dtype_name(it->second.dtype));
      if (it->second.shape != s.shape)
        fail("tensor " + s.name + " in " + meta_path + ": expected shape " + shape_text(s.shape) +
             ", the checkpoint has " + shape_text(it->second.shape));
    }
    if (!expect.allow_extra_tensors)
      for (const auto& entry : m.tensors) {
        const std::string& n = entry.first;  // not a structured binding: clang 14 cannot capture one
        if (!listed.count(n) &&
            std::none_of(expect.unchecked_prefixes.begin(), expect.unchecked_prefixes.end(),
                         [&n](const std::string& p) { return n.rfind(p, 0) == 0; }))
          fail(meta_path + " holds tensor " + n + ", which this program does not have");
      }
    for (const CounterSpec& c : expect.counters) {
      auto it = m.counters.find(c.name);
      if (it == m.counters.end()) fail(meta_path + " has no counter " + c.name);
      if (it->second < c.lo || it->second > c.hi)
        fail("counter " + c.name + " in " + meta_path + " is " + std::to_string(it->second) +
             ", expected within [" + std::to_string(c.lo) + ", " + std::to_string(c.hi) + "]");
    }
    // Every block's checksum, the ranks taking turns.
    std::vector<std::unique_ptr<FileReader>> files(m.files.size());
    size_t index = 0;
    for (const auto& [n, t] : m.tensors) {
      for (const BlockEntry& b : t.blocks) {
        if (index++ % static_cast<size_t>(group.size()) != static_cast<size_t>(group.rank()))
          continue;
        if (!files[b.file]) files[b.file] = std::make_unique<FileReader>(state->paths[b.file]);
        const uint32_t crc = crc_of_range(*files[b.file], b.byte_offset, b.nbytes);
        if (crc != b.crc)
          fail("tensor " + n + ", block at " + shape_text(b.offsets) + " of size " +
               shape_text(b.sizes) + " in " + state->paths[b.file] + ": checksum mismatch (stored " +
               hex32(b.crc) + ", computed " + hex32(crc) + "): the file is damaged");
      }
    }
  });
  return Reader(std::move(state));
}

const std::string& Reader::directory() const { return s_->dir; }
int64_t Reader::step() const { return s_->meta.step; }

int64_t Reader::counter(const std::string& name) const {
  auto it = s_->meta.counters.find(name);
  if (it == s_->meta.counters.end()) fail(s_->dir + " has no counter " + name);
  return it->second;
}

bool Reader::has(const std::string& name) const { return s_->meta.tensors.count(name) != 0; }

std::vector<std::string> Reader::names() const {
  std::vector<std::string> out;
  for (const auto& [n, t] : s_->meta.tensors) out.push_back(n);
  return out;
}

void Reader::read_into(const std::string& name, const std::vector<int64_t>& offsets,
                       Tensor dst) const {
  auto it = s_->meta.tensors.find(name);
  if (it == s_->meta.tensors.end()) fail(s_->dir + " has no tensor " + name);
  const TensorEntry& t = it->second;
  if (!dst.defined()) fail("reading " + name + ": the destination tensor is undefined");
  const std::vector<int64_t> off = offsets.empty() ? std::vector<int64_t>(t.shape.size(), 0) : offsets;
  if (dst.dtype() != t.dtype)
    fail("reading " + name + " from " + s_->dir + ": destination is " + dtype_name(dst.dtype()) +
         ", the tensor is " + dtype_name(t.dtype));
  if (off.size() != t.shape.size() || static_cast<size_t>(dst.dim()) != t.shape.size())
    fail("reading " + name + " from " + s_->dir + ": part at " + shape_text(off) + " of size " +
         shape_text(dst.shape()) + " for a tensor of shape " + shape_text(t.shape));
  Box want;
  for (size_t d = 0; d < t.shape.size(); ++d) {
    const int64_t lo = off[d], hi = off[d] + dst.size(static_cast<int64_t>(d));
    if (lo < 0 || hi > t.shape[d])
      fail("reading " + name + " from " + s_->dir + ": part at " + shape_text(off) + " of size " +
           shape_text(dst.shape()) + " lies outside its shape " + shape_text(t.shape));
    want.lo.push_back(lo);
    want.hi.push_back(hi);
  }
  if (dst.numel() == 0) return;
  const size_t elem = dtype_size(t.dtype);
  std::vector<char> buffer;
  for (const BlockEntry& b : t.blocks) {
    Box have, overlap;
    bool empty_overlap = false;
    for (size_t d = 0; d < t.shape.size(); ++d) {
      have.lo.push_back(b.offsets[d]);
      have.hi.push_back(b.offsets[d] + b.sizes[d]);
      overlap.lo.push_back(std::max(want.lo[d], have.lo[d]));
      overlap.hi.push_back(std::min(want.hi[d], have.hi[d]));
      if (overlap.lo[d] >= overlap.hi[d]) empty_overlap = true;
    }
    if (empty_overlap) continue;
    // The block streamed in groups of whole rows along dim 0 (each a contiguous byte range and a
    // box of its own): the checksum and the copy read each group while it is in cache, and the
    // buffer stays bounded whatever the block's size. When the block is exactly the part asked
    // for, its bytes go straight into dst.
    const FileReader f(s_->paths[b.file]);
    const bool exact = have.lo == want.lo && have.hi == want.hi;
    const int64_t rows = t.shape.empty() ? 1 : b.sizes[0];
    const int64_t row_bytes = rows == 0 ? 0 : b.nbytes / rows;
    const int64_t group = std::max<int64_t>(1, (int64_t{8} << 20) / std::max<int64_t>(1, row_bytes));
    uint32_t crc = 0;
    for (int64_t r0 = 0; r0 < rows; r0 += group) {
      const int64_t n = std::min(group, rows - r0);
      const auto len = static_cast<size_t>(n * row_bytes);
      char* target = nullptr;
      if (exact) {
        target = static_cast<char*>(dst.raw_data()) + r0 * row_bytes;
      } else {
        buffer.resize(std::max(buffer.size(), len));
        target = buffer.data();
      }
      f.read_at(target, len, b.byte_offset + r0 * row_bytes);
      crc = crc32c(crc, target, len);
      if (exact) continue;
      Box part = have, overlap_part = overlap;
      if (!t.shape.empty()) {
        part.lo[0] = have.lo[0] + r0;
        part.hi[0] = part.lo[0] + n;
        overlap_part.lo[0] = std::max(overlap.lo[0], part.lo[0]);
        overlap_part.hi[0] = std::min(overlap.hi[0], part.hi[0]);
        if (overlap_part.lo[0] >= overlap_part.hi[0]) continue;
      }
      copy_box(target, part, static_cast<char*>(dst.raw_data()), want, overlap_part, elem);
    }
    if (crc != b.crc)
      fail("tensor " + name + ", block at " + shape_text(b.offsets) + " in " + s_->paths[b.file] +
           ": checksum mismatch (stored " + hex32(b.crc) + ", computed " + hex32(crc) +
           "): the file changed after it was checked");
  }
  dst.bump_version();
}

Tensor Reader::read(const std::string& name) const {
  auto it = s_->meta.tensors.find(name);
  if (it == s_->meta.tensors.end()) fail(s_->dir + " has no tensor " + name);
  Tensor t = empty(it->second.shape, it->second.dtype);
  read_into(name, {}, t);
  return t;
}

}  // namespace ferry::checkpoint
