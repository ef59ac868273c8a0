#include "collectives/checkpoint/metadata.h"

#include "collectives/checkpoint/crc32c.h"

#include <ferry/runtime/error.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <limits>
#include <set>

namespace ferry::checkpoint::detail {

bool checked_mul(int64_t a, int64_t b, int64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}
bool checked_add(int64_t a, int64_t b, int64_t* out) {
  return !__builtin_add_overflow(a, b, out);
}

bool valid_name(std::string_view s) {
  if (s.empty() || s.size() > kMaxNameBytes) return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == ':' || c == '/' || c == '@' || c == '+' ||
                    c == '-';
    if (!ok) return false;
  }
  return true;
}

bool valid_value(std::string_view s) {
  if (s.size() > 1024) return false;
  for (char c : s)
    if (c <= ' ' || c > '~') return false;
  return true;
}

std::string shape_text(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s.append(i ? ", " : "").append(std::to_string(v[i]));
  return s.append("]");
}

namespace {

std::string list_text(const std::vector<int64_t>& v) {
  if (v.empty()) return "-";
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s.append(i ? "," : "").append(std::to_string(v[i]));
  return s;
}

std::string hex32(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

class LineParser {
 public:
  LineParser(const std::string& where, size_t line) : where_(where), line_(line) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw InvalidArgument("ferry: " + where_ + ": metadata line " + std::to_string(line_) + ": " +
                          what);
  }

  // A decimal integer in [lo, hi]: digits only (no sign, no spaces, no hex).
  int64_t integer(std::string_view t, int64_t lo, int64_t hi, const char* what) const {
    if (t.empty()) fail(std::string(what) + " is empty");
    for (char c : t)
      if (c < '0' || c > '9') fail(std::string(what) + " is not a number: '" + clip(t) + "'");
    int64_t v = 0;
    const auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc() || ptr != t.data() + t.size() || v < lo || v > hi)
      fail(std::string(what) + " " + clip(t) + " is outside [" + std::to_string(lo) + ", " +
           std::to_string(hi) + "]");
    return v;
  }

  std::vector<int64_t> list(std::string_view t, int64_t hi, const char* what) const {
    std::vector<int64_t> out;
    if (t == "-") return out;
    size_t at = 0;
    while (true) {
      const size_t comma = t.find(',', at);
      const std::string_view item = t.substr(at, comma == std::string_view::npos ? t.npos : comma - at);
      if (out.size() >= kMaxDims)
        fail(std::string(what) + " has more than " + std::to_string(kMaxDims) + " dimensions");
      out.push_back(integer(item, 0, hi, what));
      if (comma == std::string_view::npos) break;
      at = comma + 1;
    }
    return out;
  }

  uint32_t crc(std::string_view t) const {
    if (t.size() != 8) fail("checksum '" + clip(t) + "' is not 8 hex digits");
    uint32_t v = 0;
    for (char c : t) {
      int d = -1;
      if (c >= '0' && c <= '9') d = c - '0';
      else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
      if (d < 0) fail("checksum '" + clip(t) + "' is not 8 lowercase hex digits");
      v = (v << 4) | static_cast<uint32_t>(d);
    }
    return v;
  }

  static std::string clip(std::string_view t) {
    std::string s(t.substr(0, 64));
    for (char& c : s)
      if (c < ' ' || c > '~') c = '?';
    return t.size() > 64 ? s + "..." : s;
  }

 private:
  const std::string& where_;
  size_t line_;
};

std::vector<std::string_view> tokens(std::string_view line) {
  std::vector<std::string_view> out;
  size_t at = 0;
  while (at <= line.size()) {
    const size_t sp = line.find(' ', at);
    out.push_back(line.substr(at, sp == std::string_view::npos ? line.npos : sp - at));
    if (sp == std::string_view::npos) break;
    at = sp + 1;
  }
  return out;
}

// Whether the boxes [ao, ao+as) and [bo, bo+bs) intersect.
bool boxes_overlap(const BlockEntry& a, const BlockEntry& b) {
  for (size_t d = 0; d < a.offsets.size(); ++d) {
    if (a.offsets[d] >= b.offsets[d] + b.sizes[d] || b.offsets[d] >= a.offsets[d] + a.sizes[d])
      return false;
  }
  return true;
}

}  // namespace

std::string format_metadata(const Metadata& m) {
  std::string s = "ferry-checkpoint 1\n";
  s += "step " + std::to_string(m.step) + "\n";
  s += "world_size " + std::to_string(m.world_size) + "\n";
  for (const FileEntry& f : m.files) s += "file " + f.name + " " + std::to_string(f.size) + "\n";
  for (const auto& [k, v] : m.counters) s += "counter " + k + " " + std::to_string(v) + "\n";
  for (const auto& [k, v] : m.config) s += "config " + k + " " + v + "\n";
  for (const auto& [name, t] : m.tensors) {
    s += "tensor " + name + " " + dtype_name(t.dtype) + " " + list_text(t.shape) + "\n";
    for (const BlockEntry& b : t.blocks) {
      s += "block " + name + " " + std::to_string(b.file) + " " + list_text(b.offsets) + " " +
           list_text(b.sizes) + " " + std::to_string(b.byte_offset) + " " +
           std::to_string(b.nbytes) + " " + hex32(b.crc) + "\n";
    }
  }
  s += "end " + hex32(crc32c(0, s.data(), s.size())) + "\n";
  return s;
}

Metadata parse_metadata(std::string_view text, const std::string& where, bool partial) {
  auto fail = [&](const std::string& what) -> void {
    throw InvalidArgument("ferry: " + where + ": " + what);
  };
  if (text.size() > kMaxMetadataBytes)
    fail("metadata of " + std::to_string(text.size()) + " bytes, more than the " +
         std::to_string(kMaxMetadataBytes) + " a checkpoint may have");
  // In this order: a foreign file is named as such, then a short one, then a damaged one (its
  // checksum), before any line is read for what it says.
  if (text.substr(0, 19) != "ferry-checkpoint 1\n")
    fail("not a ferry checkpoint (the metadata does not start with \"ferry-checkpoint 1\")");
  if (text.back() != '\n') fail("metadata is truncated (it does not end with a line break)");
  // The last line is "end <crc of everything before it>".
  const size_t last_start = text.rfind('\n', text.size() - 2) == std::string_view::npos
                                ? 0
                                : text.rfind('\n', text.size() - 2) + 1;
  const std::string_view last = text.substr(last_start, text.size() - 1 - last_start);
  if (last.substr(0, 4) != "end ") fail("metadata is truncated (no \"end\" line)");
  {
    LineParser p(where, static_cast<size_t>(std::count(text.begin(), text.end(), '\n')));
    const std::vector<std::string_view> t = tokens(last);
    if (t.size() != 2) p.fail("\"end\" takes 1 field");
    const uint32_t stored = p.crc(t[1]);
    const uint32_t computed = crc32c(0, text.data(), last_start);
    if (stored != computed)
      fail("metadata checksum mismatch (stored " + hex32(stored) + ", computed " +
           hex32(computed) + "): the file was changed or damaged");
  }
  Metadata m;
  bool have_step = false, have_world = false;
  std::set<std::string, std::less<>> file_names;
  size_t line_no = 0, at = 0;
  while (at < last_start) {
    const size_t nl = text.find('\n', at);
    const std::string_view line = text.substr(at, nl - at);
    at = nl + 1;
    ++line_no;
    LineParser p(where, line_no);
    if (line.size() > kMaxLineBytes)
      p.fail("longer than " + std::to_string(kMaxLineBytes) + " bytes");
    const std::vector<std::string_view> t = tokens(line);
    if (line_no == 1) continue;  // the header, checked above
    for (std::string_view tok : t)
      if (tok.empty()) p.fail("empty field (two spaces, or a space at the end)");
    const std::string_view kind = t[0];
    auto want = [&](size_t n) {
      if (t.size() != n)
        p.fail(std::string("\"").append(kind).append("\" takes ") + std::to_string(n - 1) +
               " fields, not " + std::to_string(t.size() - 1));
    };
    auto name_of = [&](std::string_view s, const char* what) {
      if (!valid_name(s)) p.fail(std::string(what) + " '" + LineParser::clip(s) + "' is not a valid name");
      return std::string(s);
    };
    if (kind == "step") {
      want(2);
      if (have_step) p.fail("a second \"step\"");
      m.step = p.integer(t[1], 0, std::numeric_limits<int64_t>::max(), "step");
      have_step = true;
    } else if (kind == "world_size") {
      want(2);
      if (have_world) p.fail("a second \"world_size\"");
      m.world_size = p.integer(t[1], 1, 1 << 20, "world_size");
      have_world = true;
    } else if (kind == "file") {
      want(3);
      FileEntry f{name_of(t[1], "file"), p.integer(t[2], 0, std::numeric_limits<int64_t>::max(), "file size")};
      if (!file_names.insert(f.name).second) p.fail("file " + f.name + " listed twice");
      m.files.push_back(f);
    } else if (kind == "counter") {
      want(3);
      const std::string k = name_of(t[1], "counter");
      int64_t v = 0;
      if (t[2].size() > 1 && t[2][0] == '-')
        v = -p.integer(t[2].substr(1), 1, std::numeric_limits<int64_t>::max(), "counter");
      else
        v = p.integer(t[2], 0, std::numeric_limits<int64_t>::max(), "counter");
      if (!m.counters.emplace(k, v).second) p.fail("counter " + k + " given twice");
    } else if (kind == "config") {
      if (t.size() != 2 && t.size() != 3) want(3);
      const std::string k = name_of(t[1], "config key");
      const std::string_view v = t.size() == 3 ? t[2] : std::string_view();
      if (!valid_value(v)) p.fail("config " + k + " has an invalid value");
      if (!m.config.emplace(k, std::string(v)).second) p.fail("config " + k + " given twice");
    } else if (kind == "tensor") {
      want(4);
      const std::string name = name_of(t[1], "tensor");
      TensorEntry e;
      try {
        e.dtype = dtype_from_name(t[2]);
      } catch (const InvalidArgument&) {
        p.fail("tensor " + name + ": unknown dtype '" + LineParser::clip(t[2]) + "'");
      }
      if (dtype_name(e.dtype) != t[2])
        p.fail("tensor " + name + ": dtype '" + LineParser::clip(t[2]) + "' is not a canonical name");
      e.shape = p.list(t[3], kMaxDimSize, "shape");
      if (m.tensors.count(name)) p.fail("tensor " + name + " declared twice");
      m.tensors.emplace(name, std::move(e));
    } else if (kind == "block") {
      want(8);
      const std::string name = name_of(t[1], "tensor");
      auto it = m.tensors.find(name);
      if (it == m.tensors.end()) p.fail("block of " + name + " before its \"tensor\" line");
      TensorEntry& e = it->second;
      if (e.blocks.size() >= kMaxBlocksPerTensor)
        p.fail("tensor " + name + " has more than " + std::to_string(kMaxBlocksPerTensor) + " blocks");
      BlockEntry b;
      b.file = static_cast<size_t>(p.integer(t[2], 0, 1 << 20, "file index"));
      b.offsets = p.list(t[3], kMaxDimSize, "block offsets");
      b.sizes = p.list(t[4], kMaxDimSize, "block sizes");
      b.byte_offset = p.integer(t[5], 0, std::numeric_limits<int64_t>::max(), "byte offset");
      b.nbytes = p.integer(t[6], 0, std::numeric_limits<int64_t>::max(), "byte count");
      b.crc = p.crc(t[7]);
      // Checked here, while the line number is known.
      if (b.offsets.size() != e.shape.size() || b.sizes.size() != e.shape.size())
        p.fail("block of " + name + " has " + std::to_string(b.offsets.size()) + "/" +
               std::to_string(b.sizes.size()) + " offsets/sizes for a tensor of " +
               std::to_string(e.shape.size()) + " dimensions");
      int64_t volume = 1;
      for (size_t d = 0; d < e.shape.size(); ++d) {
        int64_t end = 0;
        if (b.sizes[d] == 0 || !checked_add(b.offsets[d], b.sizes[d], &end) || end > e.shape[d])
          p.fail("block of " + name + " at " + shape_text(b.offsets) + " of size " +
                 shape_text(b.sizes) + " is empty or outside its shape " + shape_text(e.shape));
        if (!checked_mul(volume, b.sizes[d], &volume)) p.fail("block of " + name + " is too large");
      }
      int64_t want_bytes = 0;
      if (!checked_mul(volume, static_cast<int64_t>(dtype_size(e.dtype)), &want_bytes) ||
          want_bytes != b.nbytes)
        p.fail("block of " + name + " of size " + shape_text(b.sizes) + " (" +
               dtype_name(e.dtype) + ") says " + std::to_string(b.nbytes) + " bytes");
      e.blocks.push_back(std::move(b));
    } else {
      p.fail("unknown line kind '" + LineParser::clip(kind) + "'");
    }
  }
  if (!have_step || !have_world) fail("metadata has no \"step\" or no \"world_size\" line");
  // Blocks against their files, and the exact cover of each tensor.
  for (const auto& [name, e] : m.tensors) {
    int64_t numel = 1;
    for (int64_t d : e.shape)
      if (!checked_mul(numel, d, &numel)) fail("tensor " + name + " " + shape_text(e.shape) + " is too large");
    int64_t covered = 0;
    for (size_t i = 0; i < e.blocks.size(); ++i) {
      const BlockEntry& b = e.blocks[i];
      if (b.file >= m.files.size())
        fail("block of " + name + " names file " + std::to_string(b.file) + " of " +
             std::to_string(m.files.size()));
      int64_t end = 0;
      const FileEntry& f = m.files[b.file];
      if (!checked_add(b.byte_offset, b.nbytes, &end) || end > f.size ||
          b.byte_offset < static_cast<int64_t>(kDataHeaderBytes))
        fail("block of " + name + " at bytes [" + std::to_string(b.byte_offset) + ", +" +
             std::to_string(b.nbytes) + ") lies outside " + f.name + " of " +
             std::to_string(f.size) + " bytes");
      if (!checked_add(covered, b.nbytes / static_cast<int64_t>(dtype_size(e.dtype)), &covered))
        fail("the blocks of " + name + " are too large");
      for (size_t j = 0; j < i; ++j)
        if (boxes_overlap(b, e.blocks[j]))
          fail("blocks of " + name + " at " + shape_text(e.blocks[j].offsets) + " and " +
               shape_text(b.offsets) + " overlap");
    }
    if (!partial && covered != numel)
      fail("the blocks of " + name + " cover " + std::to_string(covered) + " of its " +
           std::to_string(numel) + " elements");
  }
  return m;
}

}  // namespace ferry::checkpoint::detail
