// Where the bytes of one message live when they are not one contiguous run (a scatter/gather
// list, in the shape of MPI's vector and hindexed datatypes): a sequence of strided runs, read
// or written in order. An all-to-all whose blocks are columns of a matrix, or segments of a
// permutation, sends and receives through layouts instead of packing into a staging buffer
// and unpacking out of it, so its bytes are copied once, as a plain all-to-all's are.
#pragma once

#include <cstddef>
#include <vector>

namespace ferry {

// `count` blocks of `block` bytes, block j starting `offset + j * stride` bytes into the buffer.
struct ByteRun {
  size_t offset = 0;
  size_t count = 1;
  size_t block = 0;
  size_t stride = 0;
};

struct ByteLayout {
  char* base = nullptr;  // written through by a receive, only read by a send
  std::vector<ByteRun> runs;

  size_t bytes() const;  // the message's size: sum of count * block
};

// Where the layout's bytes start when they are one contiguous span (empty runs aside; an empty
// layout gives its base), else null: a transport sends or receives such a layout as plain bytes.
char* contiguous_span(const ByteLayout& l);

// Copies the bytes of one layout into another, in order. The two hold the same number of bytes
// (the transports check that before copying). pack / unpack: the other side is contiguous.
void copy_layout(const ByteLayout& from, const ByteLayout& to);
void pack_layout(const ByteLayout& from, char* to);
void unpack_layout(const char* from, const ByteLayout& to);

namespace detail {
// A layout's runs where they already lie (internal): the engine keeps the runs of many blocks in
// one list, and copying a block's runs into a ByteLayout of its own cost an allocation per block.
struct ByteRunsRef {
  char* base = nullptr;
  const ByteRun* runs = nullptr;
  size_t count = 0;
};
size_t bytes_of(const ByteRunsRef& l);

// A run list for a ByteLayout from this thread's spares (empty, with the capacity an earlier
// layout left), and its return once that layout is done with. A transport that holds a layout
// while its message is in flight (the local one) gives the list back when it lets the message
// go, so that the messages of a laid-out all-to-all allocate no list in a steady state.
std::vector<ByteRun> spare_byte_runs();
void give_byte_runs(std::vector<ByteRun>&& runs) noexcept;

// Walks the pieces of `count` runs over `base` in order, a piece at a time. Address is char*
// for this process's memory, or uint64_t for an address in another process (the shared-memory
// path's reads of a peer's layout).
template <class Address>
class RunCursor {
 public:
  RunCursor(Address base, const ByteRun* runs, size_t count)
      : base_(base), runs_(runs), count_(count) {
    skip_empty();
  }
  bool done() const { return run_ == count_; }
  Address at() const {
    const ByteRun& r = runs_[run_];
    return base_ + r.offset + block_ * r.stride + within_;
  }
  size_t left_in_block() const { return runs_[run_].block - within_; }
  void advance(size_t n) {
    within_ += n;
    if (within_ == runs_[run_].block) {
      within_ = 0;
      ++block_;
      skip_empty();
    }
  }

 private:
  // Moves past finished runs and runs with nothing in them.
  void skip_empty() {
    while (run_ < count_ && (block_ == runs_[run_].count || runs_[run_].block == 0)) {
      ++run_;
      block_ = 0;
    }
  }
  Address base_;
  const ByteRun* runs_;
  size_t count_;
  size_t run_ = 0, block_ = 0, within_ = 0;
};
// copy_layout, pack_layout and unpack_layout over runs that lie elsewhere.
void copy_runs(const ByteRunsRef& from, const ByteRunsRef& to);
void pack_runs(const ByteRunsRef& from, char* to);
void unpack_runs(const char* from, const ByteRunsRef& to);
}  // namespace detail

}  // namespace ferry
