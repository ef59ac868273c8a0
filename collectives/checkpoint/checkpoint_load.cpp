// The loading side of checkpoints: Reader::open checks a checkpoint against what the running
// program expects (collectively, before anything is allocated), Reader::read_into copies any
// part of a tensor out of whichever blocks hold it, verifying each block's checksum as it
// streams.
#include "collectives/checkpoint/checkpoint.h"

#include "collectives/checkpoint/checkpoint_internal.h"
#include "collectives/checkpoint/crc32c.h"
#include "collectives/checkpoint/metadata.h"

#include <ferry/runtime/error.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
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
}  // namespace detail

using namespace detail;

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
