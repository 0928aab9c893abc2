#include "tensorboard/crc32c.hpp"

#include <array>

namespace strata::tb {
namespace {

constexpr std::uint32_t kPolynomial = 0x82F63B78u;  // Castagnoli, bit-reflected
constexpr std::uint32_t kMaskDelta = 0xa282ead8u;

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

void append_le(std::string& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFFu));
}

}  // namespace

std::uint32_t crc32c(const void* data, std::size_t size, std::uint32_t crc) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint32_t c = ~crc;
  for (std::size_t i = 0; i < size; ++i) c = kTable[(c ^ p[i]) & 0xFFu] ^ (c >> 8);
  return ~c;
}

std::uint32_t masked_crc32c(const void* data, std::size_t size) noexcept {
  const std::uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + kMaskDelta;
}

std::string tfrecord_frame(std::string_view payload) {
  std::string out;
  out.reserve(payload.size() + 16);
  append_le(out, static_cast<std::uint64_t>(payload.size()), 8);
  append_le(out, masked_crc32c(out.data(), 8), 4);
  out.append(payload);
  append_le(out, masked_crc32c(payload.data(), payload.size()), 4);
  return out;
}

}  // namespace strata::tb
