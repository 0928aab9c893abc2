#pragma once
/// \file tfrecord.hpp
/// The TFRecord framing that TensorBoard event files use. Each record on disk is: uint64 length
/// (little-endian), uint32 masked CRC-32C of those 8 bytes, the payload, uint32 masked CRC-32C
/// of the payload (the CRC is io/crc32c.hpp's).

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace strata::tb {

/// The TFRecord "masked" CRC-32C: ((crc >> 15) | (crc << 17)) + 0xa282ead8, with crc = crc32c().
std::uint32_t masked_crc32c(const void* data, std::size_t size) noexcept;

/// One TFRecord: 8-byte little-endian length, 4-byte LE masked CRC of the length bytes, the
/// payload, 4-byte LE masked CRC of the payload (payload.size() + 16 bytes in all).
std::string tfrecord_frame(std::string_view payload);

}  // namespace strata::tb
