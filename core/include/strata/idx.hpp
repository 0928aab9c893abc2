#pragma once
/// \file idx.hpp
/// Reader of IDX files, the format of the MNIST family of datasets: the magic bytes
/// `0x00 0x00 <type code> <number of dimensions>`, one big-endian uint32 per dimension, then the
/// elements in row-major order, big-endian. Files may be gzip-compressed or raw, told apart by the
/// gzip magic bytes; a gzip stream must be whole (its CRC-32 and length trailer checked) with
/// nothing after it.
///
/// Errors are strata::Error whose message names the file and what is wrong (missing file, bad
/// magic, unknown type code, truncated header or data, data longer than the header declares).

#include <cstdint>
#include <filesystem>
#include <vector>

#include <torch/types.h>

namespace strata {

/// Element type codes of the IDX format (the third magic byte).
namespace idx_type {
inline constexpr std::uint8_t kUInt8 = 0x08;    ///< unsigned byte -> torch::kUInt8
inline constexpr std::uint8_t kInt8 = 0x09;     ///< signed byte -> torch::kInt8
inline constexpr std::uint8_t kInt16 = 0x0B;    ///< big-endian int16 -> torch::kInt16
inline constexpr std::uint8_t kInt32 = 0x0C;    ///< big-endian int32 -> torch::kInt32
inline constexpr std::uint8_t kFloat32 = 0x0D;  ///< big-endian IEEE float -> torch::kFloat32
inline constexpr std::uint8_t kFloat64 = 0x0E;  ///< big-endian IEEE double -> torch::kFloat64
}  // namespace idx_type

/// The header of an IDX file: element type and shape.
struct IdxHeader {
  std::uint8_t type_code = 0;       ///< one of idx_type
  std::vector<std::int64_t> dims;   ///< shape, outermost first (e.g. {60000, 28, 28})
};

/// Reads only the header of `file` (cheap: decompresses a few bytes). Throws strata::Error when
/// the file is missing or unreadable, the magic is wrong, the type code is unknown or the header
/// is truncated. Does not check that the data is complete; read_idx does.
IdxHeader read_idx_header(const std::filesystem::path& file);

/// Reads the whole of `file` into a contiguous CPU tensor of the stored element type (converted
/// from big-endian to native byte order) with shape = the header's dims. Throws strata::Error
/// for everything read_idx_header rejects, for truncated data (giving the bytes expected and
/// found) and for bytes after the declared data (a sign of a corrupt header or a wrong file).
torch::Tensor read_idx(const std::filesystem::path& file);

}  // namespace strata
