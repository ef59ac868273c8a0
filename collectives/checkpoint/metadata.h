// The metadata file of a checkpoint: a short text that names every block of every tensor (its
// file, byte range, place in the tensor and checksum), the counters and the configuration the
// writer recorded, and ends with a checksum of itself.
//
//   ferry-checkpoint 1
//   step 3
//   world_size 2
//   file rank-00000.bin 8448
//   file rank-00001.bin 8384
//   counter epochs_done 3
//   config model dlrm
//   tensor emb.t_0.weight float32 100,16
//   block emb.t_0.weight 0 0,0 50,16 64 3200 1f2e3d4c
//   block emb.t_0.weight 1 50,0 50,16 64 3200 0a0b0c0d
//   end 89abcdef
//
// "block NAME FILE OFFSETS SIZES BYTE_OFFSET NBYTES CRC32C": FILE indexes the file lines,
// OFFSETS and SIZES are the block's place in the tensor ("-" for a 0-d tensor), the bytes are
// row-major in the tensor's dtype (little-endian). "end" carries the CRC-32C of every byte
// before that line. Parsing is strict and bounded (it is the fuzz target of the loader): no
// number outside its range, no unknown line, no block outside its tensor or its file, blocks of
// a tensor disjoint and covering it exactly, so that a loader can allocate what a block says only
// after the file's length has vouched for it.
#pragma once

#include <ferry/runtime/dtype.h>
#include <ferry/runtime/tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::checkpoint::detail {

inline constexpr size_t kMaxMetadataBytes = size_t{64} << 20;
inline constexpr size_t kMaxLineBytes = 4096;
inline constexpr size_t kMaxNameBytes = 256;
inline constexpr size_t kMaxDims = 8;
inline constexpr int64_t kMaxDimSize = int64_t{1} << 40;
inline constexpr size_t kMaxBlocksPerTensor = 65536;
inline constexpr size_t kDataHeaderBytes = 64;  // each data file starts with "FERRYCKD" + padding

struct FileEntry {
  std::string name;  // "rank-00000.bin"
  int64_t size = 0;  // its length in bytes
};

struct BlockEntry {
  size_t file = 0;
  std::vector<int64_t> offsets, sizes;
  int64_t byte_offset = 0, nbytes = 0;
  uint32_t crc = 0;
};

struct TensorEntry {
  DType dtype = DType::Float32;
  Shape shape;
  std::vector<BlockEntry> blocks;
};

struct Metadata {
  int64_t step = 0;
  int64_t world_size = 0;
  std::vector<FileEntry> files;
  std::map<std::string, int64_t> counters;
  std::map<std::string, std::string> config;
  std::map<std::string, TensorEntry> tensors;
};

// The text of `m` (with its "end" line).
std::string format_metadata(const Metadata& m);
// Parses and checks `text` (structure, ranges, blocks inside their tensors and files, exact
// cover). Throws InvalidArgument "<where>: ..." naming the line and what is wrong. `partial`:
// one rank's part of a checkpoint being written (blocks must not overlap, but need not cover).
Metadata parse_metadata(std::string_view text, const std::string& where, bool partial = false);

// Names of tensors, counters, config keys and files: 1..256 of [A-Za-z0-9_.:/@+-].
bool valid_name(std::string_view s);
// Config values: 0..1024 printable ASCII characters without spaces.
bool valid_value(std::string_view s);

// Checked arithmetic for sizes read from a file: false on overflow.
bool checked_mul(int64_t a, int64_t b, int64_t* out);
bool checked_add(int64_t a, int64_t b, int64_t* out);

std::string shape_text(const std::vector<int64_t>& v);  // "[64, 13]"

}  // namespace ferry::checkpoint::detail
