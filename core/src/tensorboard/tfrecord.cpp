#include "tensorboard/tfrecord.hpp"

#include "io/crc32c.hpp"

namespace strata::tb {
namespace {

constexpr std::uint32_t kMaskDelta = 0xa282ead8u;

void append_le(std::string& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFFu));
}

}  // namespace

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
