// Fuzz target: a checkpoint's metadata (collectives/checkpoint/metadata.h), the text a loader
// reads from disk before anything else and trusts only as far as its checks go.
//
// Input: the metadata text (the "end" checksum is recomputed when the input asks for it by a
// first byte '!', so that mutations reach the checks behind the checksum). Properties: parsing
// either throws InvalidArgument or returns metadata in which every block lies inside its tensor
// and its file, holds exactly volume * dtype size bytes, and the blocks of each tensor cover it
// exactly; formatting it again gives a text that parses to the same; nothing else escapes, no
// allocation larger than the input allows.
#include <ferry/runtime/error.h>
#include "collectives/checkpoint/crc32c.h"
#include "collectives/checkpoint/metadata.h"

#include "fuzz_check.h"

#include <cstdint>
#include <cstdio>
#include <string>

namespace ckd = ferry::checkpoint::detail;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  if (!text.empty() && text[0] == '!') {
    text.erase(0, 1);
    const size_t end = text.rfind("end ");
    const std::string body = end == std::string::npos ? text : text.substr(0, end);
    char buf[16];
    std::snprintf(buf, sizeof buf, "%08x", ckd::crc32c(0, body.data(), body.size()));
    text = body + "end " + buf + "\n";
  }
  try {
    const ckd::Metadata m = ckd::parse_metadata(text, "fuzz");
    for (const auto& [name, t] : m.tensors) {
      FUZZ_EXPECT(ckd::valid_name(name));
      int64_t numel = 1, covered = 0;
      for (int64_t d : t.shape) FUZZ_EXPECT(ckd::checked_mul(numel, d, &numel));
      for (const ckd::BlockEntry& b : t.blocks) {
        FUZZ_EXPECT(b.file < m.files.size());
        FUZZ_EXPECT(b.byte_offset >= 0 && b.nbytes >= 0 &&
                    b.byte_offset + b.nbytes <= m.files[b.file].size);
        int64_t volume = 1;
        for (size_t d = 0; d < t.shape.size(); ++d) {
          FUZZ_EXPECT(b.offsets[d] >= 0 && b.sizes[d] > 0 && b.offsets[d] + b.sizes[d] <= t.shape[d]);
          volume *= b.sizes[d];
        }
        FUZZ_EXPECT(volume * static_cast<int64_t>(ferry::dtype_size(t.dtype)) == b.nbytes);
        covered += volume;
      }
      FUZZ_EXPECT(covered == numel);
    }
    const std::string again = ckd::format_metadata(m);
    FUZZ_EXPECT(ckd::format_metadata(ckd::parse_metadata(again, "fuzz again")) == again);
  } catch (const ferry::InvalidArgument& e) {
    FUZZ_EXPECT(std::string(e.what()).find("fuzz") != std::string::npos);
  }
  return 0;
}
