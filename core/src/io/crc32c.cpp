#include "io/crc32c.hpp"

#include <array>
#include <cstring>

// The instruction paths are compiled for their CPU feature by a function attribute, not a
// compiler flag, and run only where the CPU reports the feature.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define STRATA_CRC32C_SSE42 1
#elif defined(__aarch64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
#include <sys/auxv.h>
#define STRATA_CRC32C_ARMV8 1
#ifndef HWCAP_CRC32
#define HWCAP_CRC32 (1 << 7)
#endif
// The compilers' builtins behind arm_acle.h's __crc32cd and __crc32cb, which some versions of the
// header declare only when the whole build targets the CRC extension.
#if defined(__clang__)
#define STRATA_CRC32C_TARGET __attribute__((target("crc")))
#define STRATA_CRC32CD __builtin_arm_crc32cd
#define STRATA_CRC32CB __builtin_arm_crc32cb
#else
#define STRATA_CRC32C_TARGET __attribute__((target("+crc")))
#define STRATA_CRC32CD __builtin_aarch64_crc32cx
#define STRATA_CRC32CB __builtin_aarch64_crc32cb
#endif
#endif

namespace strata {
namespace {

constexpr std::uint32_t kPolynomial = 0x82F63B78u;  // Castagnoli, bit-reflected

constexpr std::array<std::uint32_t, 256> make_table() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1u) ? (c >> 1) ^ kPolynomial : c >> 1;
    table[i] = c;
  }
  return table;
}

constexpr std::array<std::uint32_t, 256> kTable = make_table();

#if defined(STRATA_CRC32C_SSE42) || defined(STRATA_CRC32C_ARMV8)

// The instruction paths run three independent CRCs over three adjacent stretches of a block (the
// instruction's latency is three times its issue interval) and join them: a CRC register r
// followed by n more bytes whose own register (started from 0) is s becomes r * x^(8n) + s,
// modulo the polynomial. Multiplying by the fixed x^(8n) is four table lookups, one per byte of r.

/// a * b modulo the polynomial; bit-reflected, as the registers are (x^0 is the top bit).
constexpr std::uint32_t multiply(std::uint32_t a, std::uint32_t b) {
  std::uint32_t product = 0;
  for (std::uint32_t m = 1u << 31; m != 0; m >>= 1) {
    if (a & m) product ^= b;
    b = (b & 1u) ? (b >> 1) ^ kPolynomial : b >> 1;
  }
  return product;
}

/// Multiplication of a register by x^(8n): the register n zero bytes further on.
struct Shift {
  std::array<std::array<std::uint32_t, 256>, 4> by_byte{};

  constexpr std::uint32_t operator()(std::uint32_t r) const {
    return by_byte[0][r & 0xFFu] ^ by_byte[1][(r >> 8) & 0xFFu] ^ by_byte[2][(r >> 16) & 0xFFu] ^
           by_byte[3][r >> 24];
  }
};

constexpr Shift make_shift(std::size_t bytes) {
  std::uint32_t x8n = 1u << 31;  // x^0, then one zero byte (x^8) at a time
  for (std::size_t i = 0; i < bytes; ++i) x8n = kTable[x8n & 0xFFu] ^ (x8n >> 8);
  Shift shift;
  for (int j = 0; j < 4; ++j)
    for (std::uint32_t b = 0; b < 256; ++b) shift.by_byte[j][b] = multiply(b << (8 * j), x8n);
  return shift;
}

// Each stretch of a block: long ones for large buffers, short ones for what is left.
constexpr std::size_t kLong = 8192;
constexpr std::size_t kShort = 256;
constexpr Shift kShiftLong = make_shift(kLong);
constexpr Shift kShiftShort = make_shift(kShort);

inline std::uint64_t load64(const unsigned char* p) {
  std::uint64_t v;
  std::memcpy(&v, p, sizeof v);  // little-endian, the order the instruction takes bytes in
  return v;
}

#endif

#if defined(STRATA_CRC32C_SSE42)

template <std::size_t kStride>
__attribute__((target("sse4.2"))) std::uint32_t sse42_blocks(std::uint32_t c, const unsigned char*& p,
                                                             std::size_t& size, const Shift& shift) noexcept {
  for (; size >= 3 * kStride; p += 3 * kStride, size -= 3 * kStride) {
    std::uint64_t c0 = c, c1 = 0, c2 = 0;
    for (std::size_t i = 0; i < kStride; i += 8) {
      c0 = _mm_crc32_u64(c0, load64(p + i));
      c1 = _mm_crc32_u64(c1, load64(p + kStride + i));
      c2 = _mm_crc32_u64(c2, load64(p + 2 * kStride + i));
    }
    c = shift(shift(static_cast<std::uint32_t>(c0)) ^ static_cast<std::uint32_t>(c1)) ^ static_cast<std::uint32_t>(c2);
  }
  return c;
}

__attribute__((target("sse4.2"))) std::uint32_t sse42(const void* data, std::size_t size, std::uint32_t crc) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint32_t c = ~crc;
  for (; size > 0 && (reinterpret_cast<std::uintptr_t>(p) & 7u) != 0; ++p, --size) c = _mm_crc32_u8(c, *p);
  c = sse42_blocks<kLong>(c, p, size, kShiftLong);
  c = sse42_blocks<kShort>(c, p, size, kShiftShort);
  std::uint64_t c64 = c;
  for (; size >= 8; p += 8, size -= 8) c64 = _mm_crc32_u64(c64, load64(p));
  c = static_cast<std::uint32_t>(c64);
  for (; size > 0; ++p, --size) c = _mm_crc32_u8(c, *p);
  return ~c;
}

#elif defined(STRATA_CRC32C_ARMV8)

template <std::size_t kStride>
STRATA_CRC32C_TARGET std::uint32_t armv8_blocks(std::uint32_t c, const unsigned char*& p, std::size_t& size,
                                                const Shift& shift) noexcept {
  for (; size >= 3 * kStride; p += 3 * kStride, size -= 3 * kStride) {
    std::uint32_t c0 = c, c1 = 0, c2 = 0;
    for (std::size_t i = 0; i < kStride; i += 8) {
      c0 = STRATA_CRC32CD(c0, load64(p + i));
      c1 = STRATA_CRC32CD(c1, load64(p + kStride + i));
      c2 = STRATA_CRC32CD(c2, load64(p + 2 * kStride + i));
    }
    c = shift(shift(c0) ^ c1) ^ c2;
  }
  return c;
}

STRATA_CRC32C_TARGET std::uint32_t armv8(const void* data, std::size_t size, std::uint32_t crc) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint32_t c = ~crc;
  for (; size > 0 && (reinterpret_cast<std::uintptr_t>(p) & 7u) != 0; ++p, --size) c = STRATA_CRC32CB(c, *p);
  c = armv8_blocks<kLong>(c, p, size, kShiftLong);
  c = armv8_blocks<kShort>(c, p, size, kShiftShort);
  for (; size >= 8; p += 8, size -= 8) c = STRATA_CRC32CD(c, load64(p));
  for (; size > 0; ++p, --size) c = STRATA_CRC32CB(c, *p);
  return ~c;
}

#endif

bool hardware_present() noexcept {
#if defined(STRATA_CRC32C_SSE42)
  __builtin_cpu_init();  // crc32c() may run before the constructors that would have done it
  return __builtin_cpu_supports("sse4.2");
#elif defined(STRATA_CRC32C_ARMV8)
  return (getauxval(AT_HWCAP) & HWCAP_CRC32) != 0;
#else
  return false;
#endif
}

using Crc32c = std::uint32_t (*)(const void*, std::size_t, std::uint32_t) noexcept;

Crc32c chosen() noexcept {
  static const Crc32c function = crc32c_hardware_available() ? &crc32c_hardware : &crc32c_table;
  return function;
}

}  // namespace

std::uint32_t crc32c_table(const void* data, std::size_t size, std::uint32_t crc) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint32_t c = ~crc;
  for (std::size_t i = 0; i < size; ++i) c = kTable[(c ^ p[i]) & 0xFFu] ^ (c >> 8);
  return ~c;
}

bool crc32c_hardware_available() noexcept {
  static const bool present = hardware_present();
  return present;
}

std::uint32_t crc32c_hardware(const void* data, std::size_t size, std::uint32_t crc) noexcept {
#if defined(STRATA_CRC32C_SSE42)
  return sse42(data, size, crc);
#elif defined(STRATA_CRC32C_ARMV8)
  return armv8(data, size, crc);
#else
  return crc32c_table(data, size, crc);
#endif
}

const char* crc32c_implementation() noexcept {
  if (!crc32c_hardware_available()) return "table";
#if defined(STRATA_CRC32C_SSE42)
  return "sse4.2";
#elif defined(STRATA_CRC32C_ARMV8)
  return "armv8-crc";
#else
  return "table";
#endif
}

std::uint32_t crc32c(const void* data, std::size_t size, std::uint32_t crc) noexcept {
  return chosen()(data, size, crc);
}

}  // namespace strata
