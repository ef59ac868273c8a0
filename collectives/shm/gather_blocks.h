// The blocks of a gather as the shared-memory path moves them (internal): all_gather (equal
// blocks or one per rank's rows) and broadcast (the root's tensor, every other rank's block
// empty). Every rank's block lands at its place in every rank's output, in rank order.
//
// As an all-to-all whose every rank sends the same block to all, a large gather copies blocks
// between the ranks' tensors (shm_gather_large.cpp); a small one, or a large one where a group
// is too large for its block places (above 961 ranks), goes through the segment's slots.
#pragma once

#include <ferry/collectives/algorithms/algorithms.h>
#include <ferry/collectives/shm/all_to_all_blocks.h>
#include <ferry/runtime/object_pool.h>

#include <algorithm>
#include <cstddef>
#include <utility>

namespace ferry::detail::shm {

class GatherBlocks final : public AllToAllBlocks, public Pooled {
 public:
  // W blocks of `block` bytes each: rank r's at out + r * block. `own` is this rank's input
  // (which may be its place in `out`).
  static GatherBlocks equal(const void* own, void* out, int me, size_t block) {
    return GatherBlocks(Form::Equal, own, out, me, block, 0, {});
  }
  // Rank r's block of blocks.bytes[r] at out + blocks.offset[r] (all_gather_v).
  static GatherBlocks listed(const void* own, void* out, int me, Blocks blocks) {
    return GatherBlocks(Form::Listed, own, out, me, 0, 0, std::move(blocks));
  }
  // broadcast: the root's `bytes` at `tensor` on every rank; the other ranks send nothing.
  static GatherBlocks broadcast(void* tensor, size_t bytes, int root, int me) {
    return GatherBlocks(Form::Root, tensor, tensor, me, bytes, root, {});
  }

  size_t parts() const override { return 1; }
  // This rank's block, the same for every peer.
  BlockRef send(size_t, int) const override {
    return {static_cast<char*>(const_cast<void*>(own_)), bytes(me_), {}};
  }
  BlockRef recv(size_t, int r) const override { return {out_ + offset(r), bytes(r), {}}; }

  size_t bytes(int r) const {
    switch (form_) {
      case Form::Equal: return block_;
      case Form::Root: return r == root_ ? block_ : 0;
      case Form::Listed: break;
    }
    return blocks_.bytes[static_cast<size_t>(r)];
  }
  size_t offset(int r) const {
    switch (form_) {
      case Form::Equal: return static_cast<size_t>(r) * block_;
      case Form::Root: return 0;
      case Form::Listed: break;
    }
    return blocks_.offset[static_cast<size_t>(r)];
  }
  // The largest rank's block: every rank knows it alike, so all choose the same way.
  size_t max_block() const { return form_ == Form::Listed ? blocks_.max_bytes() : block_; }
  const void* own() const { return own_; }
  char* out() const { return out_; }

 private:
  enum class Form { Equal, Listed, Root };
  GatherBlocks(Form form, const void* own, void* out, int me, size_t block, int root,
               Blocks blocks)
      : form_(form), own_(own), out_(static_cast<char*>(out)), me_(me), root_(root),
        block_(block), blocks_(std::move(blocks)) {}

  Form form_;
  const void* own_;
  char* out_;
  int me_;
  int root_;
  size_t block_;
  Blocks blocks_;  // Listed only
};

}  // namespace ferry::detail::shm
