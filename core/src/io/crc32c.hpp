#pragma once
/// \file crc32c.hpp
/// CRC-32C (Castagnoli), the checksum of checkpoint pieces, replica digests and TensorBoard's
/// TFRecord frames. It runs on the CPU's CRC-32C instruction where there is one (SSE4.2 on x86-64,
/// the ARMv8 CRC32 extension on AArch64), chosen once at run time, so the build needs no CPU
/// flag; elsewhere a byte-at-a-time table computes the same value.

#include <cstddef>
#include <cstdint>

namespace strata {

/// CRC-32C (reflected polynomial 0x82F63B78, init and final xor 0xFFFFFFFF) of `size` bytes at
/// `data`. `crc` is a previously returned value to extend: crc32c(b, nb, crc32c(a, na)) equals
/// the CRC of a followed by b. crc32c("123456789", 9) == 0xE3069283.
std::uint32_t crc32c(const void* data, std::size_t size, std::uint32_t crc = 0) noexcept;

/// The implementations crc32c() chooses from, for tests and measurements; each computes the same
/// value as crc32c().
/// The byte-at-a-time table: the fallback, and the reference the instruction is checked against.
std::uint32_t crc32c_table(const void* data, std::size_t size, std::uint32_t crc = 0) noexcept;
/// Whether this CPU has a CRC-32C instruction that crc32c() uses.
bool crc32c_hardware_available() noexcept;
/// CRC-32C on the CPU's instruction; call it only when crc32c_hardware_available().
std::uint32_t crc32c_hardware(const void* data, std::size_t size, std::uint32_t crc = 0) noexcept;
/// What crc32c() runs on: "sse4.2", "armv8-crc" or "table".
const char* crc32c_implementation() noexcept;

}  // namespace strata
