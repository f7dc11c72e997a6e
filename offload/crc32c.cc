// CRC32C: slicing-by-8 tables for the portable path; the SSE4.2 crc32
// instruction over three interleaved streams for the hardware path.
#include "offload/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace tierflow::offload {
namespace {

constexpr uint32_t kPolyReflected = 0x82F63B78u;

struct Tables {
  std::array<std::array<uint32_t, 256>, 8> t{};
  constexpr Tables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPolyReflected : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i) {
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
    }
  }
};
constexpr Tables kTables;

}  // namespace

uint32_t Crc32cPortable(uint32_t crc, const void* data, size_t num_bytes) {
  const auto* p = static_cast<const uint8_t*>(data);
  const auto& t = kTables.t;
  uint32_t c = ~crc;
  while (num_bytes >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);  // little-endian: the byte order the tables assume
    uint32_t lo = static_cast<uint32_t>(word) ^ c;
    uint32_t hi = static_cast<uint32_t>(word >> 32);
    c = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^
        t[3][hi & 0xFF] ^ t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
    p += 8;
    num_bytes -= 8;
  }
  while (num_bytes-- > 0) c = t[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
  return ~c;
}

#if defined(__x86_64__)
namespace {

// The hardware path runs three independent crc32 streams over three
// adjacent kStreamBytes pieces (the instruction has 3-cycle latency but
// issues every cycle) and joins them: CRC state is linear, so
// state(A||B) = Shift(state(A)) ^ state_from_zero(B), where Shift appends
// kStreamBytes zero bytes. Shift is linear too, so four byte tables do it.
constexpr size_t kStreamBytes = 4096;

struct ShiftTables {
  uint32_t t[4][256];
};

__attribute__((target("sse4.2"))) uint64_t ZeroExtend(uint64_t state) {
  for (size_t i = 0; i < kStreamBytes; i += 8) state = _mm_crc32_u64(state, 0);
  return state;
}

__attribute__((target("sse4.2"))) const ShiftTables& GetShiftTables() {
  static const ShiftTables tables = [] {
    ShiftTables st{};
    for (int k = 0; k < 4; ++k) {
      for (uint32_t b = 0; b < 256; ++b)
        st.t[k][b] = static_cast<uint32_t>(ZeroExtend(uint64_t{b} << (8 * k)));
    }
    return st;
  }();
  return tables;
}

inline uint64_t Shift(const ShiftTables& st, uint64_t s) {
  return st.t[0][s & 0xFF] ^ st.t[1][(s >> 8) & 0xFF] ^ st.t[2][(s >> 16) & 0xFF] ^
         st.t[3][(s >> 24) & 0xFF];
}

inline uint64_t Load64(const uint8_t* p) {
  uint64_t w;
  std::memcpy(&w, p, 8);
  return w;
}

}  // namespace

__attribute__((target("sse4.2"))) uint32_t Crc32cHardware(uint32_t crc, const void* data,
                                                          size_t num_bytes) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t c = ~crc;
  while (num_bytes > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
    --num_bytes;
  }
  if (num_bytes >= 3 * kStreamBytes) {
    const ShiftTables& st = GetShiftTables();
    while (num_bytes >= 3 * kStreamBytes) {
      uint64_t c1 = 0, c2 = 0;
      const uint8_t* p1 = p + kStreamBytes;
      const uint8_t* p2 = p + 2 * kStreamBytes;
      for (size_t i = 0; i < kStreamBytes; i += 8) {
        c = _mm_crc32_u64(c, Load64(p + i));
        c1 = _mm_crc32_u64(c1, Load64(p1 + i));
        c2 = _mm_crc32_u64(c2, Load64(p2 + i));
      }
      c = Shift(st, c) ^ c1;
      c = Shift(st, c) ^ c2;
      p += 3 * kStreamBytes;
      num_bytes -= 3 * kStreamBytes;
    }
  }
  while (num_bytes >= 8) {
    c = _mm_crc32_u64(c, Load64(p));
    p += 8;
    num_bytes -= 8;
  }
  while (num_bytes-- > 0) c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
  return ~static_cast<uint32_t>(c);
}

bool Crc32cHardwareAvailable() {
  static const bool available = __builtin_cpu_supports("sse4.2");
  return available;
}
#else
uint32_t Crc32cHardware(uint32_t crc, const void* data, size_t num_bytes) {
  return Crc32cPortable(crc, data, num_bytes);
}
bool Crc32cHardwareAvailable() { return false; }
#endif

uint32_t Crc32c(uint32_t crc, const void* data, size_t num_bytes) {
  return Crc32cHardwareAvailable() ? Crc32cHardware(crc, data, num_bytes)
                                   : Crc32cPortable(crc, data, num_bytes);
}

}  // namespace tierflow::offload
