// CRC32C (Castagnoli), the checksum of every swap-file block and header.
//
// Two implementations that give identical results: a portable slicing-by-8
// table version and an SSE4.2 version (the crc32 instruction), picked at run
// time by Crc32c() when the CPU has SSE4.2. The hardware path must not be the
// bottleneck of NVMe I/O: it runs well above 10 GB/s on one core.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tierflow::offload {

// Extends `crc` (the CRC32C of earlier bytes; 0 to start) with `num_bytes` at
// `data`. Crc32c(0, "123456789", 9) == 0xE3069283. Thread-safe.
uint32_t Crc32c(uint32_t crc, const void* data, size_t num_bytes);

// The portable table-driven implementation (any CPU).
uint32_t Crc32cPortable(uint32_t crc, const void* data, size_t num_bytes);

// True when this CPU has SSE4.2 and Crc32c() uses it.
bool Crc32cHardwareAvailable();

// The SSE4.2 implementation. REQUIRES: Crc32cHardwareAvailable().
uint32_t Crc32cHardware(uint32_t crc, const void* data, size_t num_bytes);

}  // namespace tierflow::offload
