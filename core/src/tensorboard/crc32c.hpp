#pragma once
/// \file crc32c.hpp
/// CRC-32C (Castagnoli) and the TFRecord framing that TensorBoard event files use. Each record
/// on disk is: uint64 length (little-endian), uint32 masked CRC of those 8 bytes, the payload,
/// uint32 masked CRC of the payload.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace strata::tb {

/// CRC-32C (reflected polynomial 0x82F63B78, init and final xor 0xFFFFFFFF) of `size` bytes at
/// `data`. `crc` is a previously returned value to extend: crc32c(b, nb, crc32c(a, na)) equals
/// the CRC of a followed by b. crc32c("123456789", 9) == 0xE3069283.
std::uint32_t crc32c(const void* data, std::size_t size, std::uint32_t crc = 0) noexcept;

/// The TFRecord "masked" CRC-32C: ((crc >> 15) | (crc << 17)) + 0xa282ead8, with crc = crc32c().
std::uint32_t masked_crc32c(const void* data, std::size_t size) noexcept;

/// One TFRecord: 8-byte little-endian length, 4-byte LE masked CRC of the length bytes, the
/// payload, 4-byte LE masked CRC of the payload (payload.size() + 16 bytes in all).
std::string tfrecord_frame(std::string_view payload);

}  // namespace strata::tb
