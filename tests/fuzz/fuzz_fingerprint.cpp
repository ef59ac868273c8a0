// Fuzz target: a collective fingerprint as a peer sends it (collectives/engine/fingerprint.h):
// raw bytes that FERRY_CHECK=1 and the timeout diagnosis receive from every peer, then compare
// with this rank's and describe in the MismatchError.
//
// Input: the peer's fingerprint bytes (zero-padded or cut to its size), and whatever follows as
// this rank's own call. Properties: describing and comparing any bytes neither crashes nor
// reads outside the struct, is symmetric in what it reports as differing, finds nothing
// different between a well-formed fingerprint and itself, and the check hash is never 0.
#include <ferry/collectives/engine/fingerprint.h>

#include "fuzz_check.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

using namespace ferry::detail;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Fingerprint theirs;
  std::memset(&theirs, 0, sizeof theirs);
  std::memcpy(&theirs, data, std::min(size, sizeof theirs));
  Fingerprint mine;
  if (size > sizeof theirs) {
    std::memset(&mine, 0, sizeof mine);
    std::memcpy(&mine, data + sizeof theirs, std::min(size - sizeof theirs, sizeof mine));
  } else {
    OpSummary what;
    what.has_tensor = true;
    what.ndim = 1;
    what.dims[0] = 4;
    what.agreed = 4;
    what.has_reduce_op = true;
    mine = Fingerprint::of("all_reduce", theirs.seq, theirs.group, what);
  }
  const std::string text = theirs.describe();
  FUZZ_EXPECT(!text.empty());
  (void)mine.describe();
  // A malformed fingerprint (bytes no build of ferry makes) differs from everything.
  FUZZ_EXPECT((fingerprint_difference(theirs, theirs) == nullptr) == theirs.well_formed());
  const char* ab = fingerprint_difference(mine, theirs);
  const char* ba = fingerprint_difference(theirs, mine);
  FUZZ_EXPECT((ab == nullptr) == (ba == nullptr));
  if (ab != nullptr) FUZZ_EXPECT(std::strcmp(ab, ba) == 0 || std::strstr(ab, "element") != nullptr);
  FUZZ_EXPECT(check_hash(theirs) != 0);
  // Calls that agree hash alike (the tags of the default mode depend on it). An incomplete
  // fingerprint (diagnosis only) and a dtype without a tensor are not compared by
  // fingerprint_difference, so they may hash apart.
  if (ab == nullptr && mine.complete && theirs.complete && mine.dtype == theirs.dtype)
    FUZZ_EXPECT(check_hash(mine) == check_hash(theirs));
  return 0;
}
