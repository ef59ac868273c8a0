// CRC-32C (Castagnoli), the checksum of every block of a checkpoint. Hardware instructions
// (SSE 4.2) where the CPU has them, a slice-by-8 table otherwise; both give the same values
// (crc32c("123456789") == 0xE3069283).
#pragma once

#include <cstddef>
#include <cstdint>

namespace ferry::checkpoint::detail {

// Continues `crc` (0 for a fresh checksum) over n bytes.
uint32_t crc32c(uint32_t crc, const void* data, size_t n);
// The table version alone (for tests: it must agree with the hardware one).
uint32_t crc32c_portable(uint32_t crc, const void* data, size_t n);

}  // namespace ferry::checkpoint::detail
