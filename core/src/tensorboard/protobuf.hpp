#pragma once
/// \file protobuf.hpp
/// A minimal protobuf wire-format encoder: just enough to write TensorBoard events without the
/// protobuf library. Fields are appended in call order; callers emit them in field-number order
/// and skip proto3 defaults themselves, which makes the output byte-identical to what the
/// official serializers produce for the same message (map entries aside).

#include <bit>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace strata::tb::detail {

/// Protobuf wire types.
enum class WireType : std::uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

/// Builds one serialized message. Field numbers must be in 1..2^29-1.
class ProtoWriter {
 public:
  /// Unsigned varint field (uint32, uint64).
  ProtoWriter& uint_field(std::uint32_t field, std::uint64_t value) {
    put_tag(field, WireType::kVarint);
    put_varint(value);
    return *this;
  }
  /// int32 / int64 / enum field: negative values take 10 bytes (two's complement, not zigzag).
  ProtoWriter& int_field(std::uint32_t field, std::int64_t value) {
    return uint_field(field, static_cast<std::uint64_t>(value));
  }
  /// bool field, encoded as varint 0 or 1.
  ProtoWriter& bool_field(std::uint32_t field, bool value) { return uint_field(field, value ? 1 : 0); }
  /// double field (fixed64, IEEE-754 little-endian).
  ProtoWriter& double_field(std::uint32_t field, double value) {
    put_tag(field, WireType::kFixed64);
    put_fixed(std::bit_cast<std::uint64_t>(value), 8);
    return *this;
  }
  /// float field (fixed32, IEEE-754 little-endian).
  ProtoWriter& float_field(std::uint32_t field, float value) {
    put_tag(field, WireType::kFixed32);
    put_fixed(std::bit_cast<std::uint32_t>(value), 4);
    return *this;
  }
  /// string or bytes field (length-delimited); written even when empty.
  ProtoWriter& bytes_field(std::uint32_t field, std::string_view value) {
    put_tag(field, WireType::kLengthDelimited);
    put_varint(value.size());
    buf_.append(value);
    return *this;
  }
  /// Nested message field; written even when the message is empty (sets presence / oneof).
  ProtoWriter& message_field(std::uint32_t field, const ProtoWriter& message) {
    return bytes_field(field, message.bytes());
  }

  /// The serialized message so far.
  const std::string& bytes() const noexcept { return buf_; }
  /// Moves the serialized message out.
  std::string take() && noexcept { return std::move(buf_); }

  /// Appends `value` as a base-128 varint (1 to 10 bytes) to `out`.
  static void append_varint(std::string& out, std::uint64_t value) {
    while (value >= 0x80) {
      out.push_back(static_cast<char>((value & 0x7F) | 0x80));
      value >>= 7;
    }
    out.push_back(static_cast<char>(value));
  }

 private:
  void put_varint(std::uint64_t value) { append_varint(buf_, value); }
  void put_tag(std::uint32_t field, WireType type) {
    put_varint((static_cast<std::uint64_t>(field) << 3) | static_cast<std::uint32_t>(type));
  }
  void put_fixed(std::uint64_t value, int bytes) {
    for (int i = 0; i < bytes; ++i) buf_.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
  }

  std::string buf_;
};

}  // namespace strata::tb::detail
