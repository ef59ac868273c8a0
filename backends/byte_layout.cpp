#include <ferry/backends/byte_layout.h>

#include <algorithm>
#include <cstring>

namespace ferry {
namespace {

// Walks a layout's blocks in order, a piece at a time.
class Cursor {
 public:
  explicit Cursor(const ByteLayout& l) : l_(l) { skip_empty(); }
  bool done() const { return run_ == l_.runs.size(); }
  char* at() const {
    const ByteRun& r = l_.runs[run_];
    return l_.base + r.offset + block_ * r.stride + within_;
  }
  size_t left_in_block() const { return l_.runs[run_].block - within_; }
  void advance(size_t n) {
    within_ += n;
    if (within_ == l_.runs[run_].block) {
      within_ = 0;
      ++block_;
      skip_empty();
    }
  }

 private:
  // Moves past finished runs and runs with nothing in them.
  void skip_empty() {
    while (run_ < l_.runs.size() &&
           (block_ == l_.runs[run_].count || l_.runs[run_].block == 0)) {
      ++run_;
      block_ = 0;
    }
  }
  const ByteLayout& l_;
  size_t run_ = 0, block_ = 0, within_ = 0;
};

}  // namespace

size_t ByteLayout::bytes() const {
  size_t n = 0;
  for (const ByteRun& r : runs) n += r.count * r.block;
  return n;
}

void copy_layout(const ByteLayout& from, const ByteLayout& to) {
  Cursor s(from), d(to);
  while (!s.done() && !d.done()) {
    const size_t n = std::min(s.left_in_block(), d.left_in_block());
    std::memcpy(d.at(), s.at(), n);
    s.advance(n);
    d.advance(n);
  }
}

void pack_layout(const ByteLayout& from, char* to) {
  ByteLayout flat{to, {ByteRun{0, 1, from.bytes(), 0}}};
  copy_layout(from, flat);
}

void unpack_layout(const char* from, const ByteLayout& to) {
  ByteLayout flat{const_cast<char*>(from), {ByteRun{0, 1, to.bytes(), 0}}};
  copy_layout(flat, to);
}

}  // namespace ferry
