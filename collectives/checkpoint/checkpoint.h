// Distributed checkpoints: every rank writes the blocks of the tensors it holds, in parallel,
// to a file of its own; rank 0 adds one metadata file that names every block (tensor, place,
// dtype, file, bytes, CRC-32C), the counters and the configuration; the checkpoint becomes
// visible only when every rank's file is complete (a collective commit). Loading reads the
// blocks any rank needs, whatever the world size and the sharding that wrote them.
//
// On disk, under a root directory ROOT:
//   ROOT/ckpt-00000003/metadata          the commit record (written last)
//   ROOT/ckpt-00000003/rank-00000.bin    rank 0's blocks
//   ROOT/ckpt-00000003/rank-00001.bin    ...
//   ROOT/.ckpt-00000004.tmp/             a save in progress (or one that died); never read
//
// Crash safety: every file is written under a temporary name, every write checked, fsync'ed and
// renamed; the checkpoint directory is built under a temporary name and renamed into place by
// rank 0 only after every rank reported its file complete and the metadata is on disk, then the
// root directory is fsync'ed. A crash at any point leaves the previous checkpoints as they were;
// the oldest are removed only after the new one is committed (keep N, default 2).
//
// Trust: a loader reads a checkpoint as untrusted input. The metadata is bounded (64 MiB) and
// checked before anything it describes is allocated: every block lies inside its tensor and its
// file (whose length is read from the file system, not from the metadata), the blocks of a tensor
// cover it exactly once, shapes and dtypes are exactly those the running program expects, the
// counters lie in their ranges and the configuration matches. Every block's checksum is verified
// (by the ranks in parallel) before Reader::open returns, and again when a block is read. The
// decision is collective: every rank returns, or every rank throws the same InvalidArgument
// naming the file, the tensor and what was expected and found.
//
// Data is stored in the host's byte order (little-endian on every platform ferry builds on).
// All ranks must see the same file system (one host, or a shared one).
#pragma once

#include <ferry/collectives/group.h>
#include <ferry/runtime/tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ferry::checkpoint {

// A block of a tensor that this rank saves: `data` is the part of the tensor `name` (of shape
// `shape`) that starts at `offsets` (one per dimension; empty: all zeros). A tensor held whole
// by one rank is a single block; a replicated tensor should be given by one rank only. Names:
// 1..256 of [A-Za-z0-9_.:/@+-].
struct Block {
  std::string name;
  Shape shape;
  std::vector<int64_t> offsets;
  Tensor data;
};

// What a checkpoint holds besides tensors: integer counters (epochs done, steps) and
// configuration text (keys as names, values printable without spaces) that a loader compares
// with its own.
struct Record {
  std::map<std::string, int64_t> counters;
  std::map<std::string, std::string> config;
};

struct SaveOptions {
  int keep = 2;  // committed checkpoints kept under the root (the newest), >= 1
};

// Collective: every rank of `group` calls it with its own blocks and the same root, step and
// record. Returns the committed directory (ROOT/ckpt-<step>). A step saved before is replaced
// (atomically too). Throws InvalidArgument (every rank the same) when a block is malformed or
// a write fails, naming the rank, the file and the reason; the previous checkpoints stay intact.
std::string save(const std::string& root, int64_t step, const std::vector<Block>& blocks,
                 const Record& record, const Group& group, const SaveOptions& options = {});

// What the loading program expects.
struct TensorSpec {
  std::string name;
  Shape shape;
  DType dtype = DType::Float32;
  bool required = true;  // false: may be absent (then Reader::has says so)
};
struct CounterSpec {
  std::string name;
  int64_t lo = 0, hi = 0;  // the counter must be present and in [lo, hi]
};
struct Expectation {
  std::vector<TensorSpec> tensors;
  std::vector<CounterSpec> counters;
  std::map<std::string, std::string> config;  // each key present with this value
  bool allow_extra_tensors = false;           // false: a tensor not listed is an error
  // Tensors whose names start with one of these may be present or not, with any shape and dtype:
  // the caller checks what it reads (state whose layout depends on the plan that wrote it).
  std::vector<std::string> unchecked_prefixes;
};

class Reader {
 public:
  // Collective. `path` is a checkpoint directory or a root (its newest committed checkpoint,
  // chosen by rank 0 for all). Returns once every rank checked the metadata against
  // `expect` and the files, and every block's checksum was verified by some rank.
  static Reader open(const std::string& path, const Expectation& expect, const Group& group);

  const std::string& directory() const;
  int64_t step() const;
  int64_t counter(const std::string& name) const;  // one of the expected counters
  bool has(const std::string& name) const;         // the checkpoint holds this tensor
  std::vector<std::string> names() const;          // every tensor it holds, sorted

  // Local: fills `dst` (contiguous, the tensor's dtype) with the part of tensor `name` that starts
  // at `offsets` (empty: zeros) and has dst's shape, from whichever blocks hold it. Each block
  // read is verified against its checksum again (while it streams through a bounded buffer; on
  // a mismatch dst may hold part of the block). Throws InvalidArgument for a part outside the
  // tensor, a dtype mismatch or a read or checksum failure. Being local, it can fail on one rank
  // while the others go on: run a program's reads (and what it loads them into) inside agree()
  // so that every rank fails alike and the ranks stay in step.
  void read_into(const std::string& name, const std::vector<int64_t>& offsets, Tensor dst) const;
  // Local: the whole tensor.
  Tensor read(const std::string& name) const;

  struct State;

 private:
  explicit Reader(std::shared_ptr<const State> s) : s_(std::move(s)) {}
  std::shared_ptr<const State> s_;
};

// Collective: runs `fn` on every rank; when it throws on any rank, every rank throws the same
// InvalidArgument "<what>: rank R: <message>" (R the lowest failing rank), so that no rank goes
// on alone. Errors of the group itself (a timeout, a dead peer) propagate as they are.
void agree(const Group& group, const std::string& what, const std::function<void()>& fn);

// Local: the newest committed checkpoint directory under `root`, or "" when there is none.
std::string latest(const std::string& root);

}  // namespace ferry::checkpoint
