// Unit tests for CRC-32C: the known vectors on every implementation, extending a running CRC, and
// the CPU instruction against the byte-at-a-time table at every alignment and length.

#include "test_support.hpp"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "io/crc32c.hpp"

namespace {

using Crc32c = std::uint32_t (*)(const void*, std::size_t, std::uint32_t) noexcept;

struct Implementation {
  std::string name;
  Crc32c function;
};

std::uint32_t chosen(const void* data, std::size_t size, std::uint32_t crc) noexcept {
  return strata::crc32c(data, size, crc);
}

/// crc32c() as chosen at run time, the table, and the instruction where this CPU has it.
std::vector<Implementation> implementations() {
  std::vector<Implementation> all{{"crc32c", &chosen}, {"table", &strata::crc32c_table}};
  if (strata::crc32c_hardware_available()) all.push_back({"hardware", &strata::crc32c_hardware});
  return all;
}

std::vector<unsigned char> random_bytes(std::size_t size, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<unsigned char> bytes(size);
  for (auto& b : bytes) b = static_cast<unsigned char>(rng());
  return bytes;
}

}  // namespace

TEST_CASE("crc32c matches the RFC 3720 vectors on every implementation") {
  const std::string digits = "123456789";
  const std::vector<unsigned char> zeros(32, 0x00);
  const std::vector<unsigned char> ones(32, 0xFF);
  std::vector<unsigned char> ascending(32);
  for (int i = 0; i < 32; ++i) ascending[i] = static_cast<unsigned char>(i);
  for (const auto& [name, crc32c] : implementations()) {
    CAPTURE(name);
    CHECK(crc32c(digits.data(), digits.size(), 0) == 0xE3069283u);
    CHECK(crc32c(zeros.data(), zeros.size(), 0) == 0x8A9136AAu);
    CHECK(crc32c(ones.data(), ones.size(), 0) == 0x62A8AB43u);
    CHECK(crc32c(ascending.data(), ascending.size(), 0) == 0x46DD794Eu);
    CHECK(crc32c(nullptr, 0, 0) == 0u);
    CHECK(crc32c(nullptr, 0, 0xE3069283u) == 0xE3069283u);
  }
}

TEST_CASE("crc32c extends a running CRC") {
  const std::string digits = "123456789";
  const std::uint32_t head = strata::crc32c(digits.data(), 4);
  CHECK(strata::crc32c(digits.data() + 4, digits.size() - 4, head) == 0xE3069283u);
  // Split anywhere, including inside the instruction path's interleaved blocks.
  const auto data = random_bytes(60000, 7);
  const std::uint32_t whole = strata::crc32c_table(data.data(), data.size());
  for (const auto& [name, crc32c] : implementations())
    for (std::size_t split : {0, 1, 7, 8, 767, 768, 769, 24575, 24576, 24577, 30001, 59999, 60000}) {
      CAPTURE(name);
      CAPTURE(split);
      CHECK(crc32c(data.data() + split, data.size() - split, crc32c(data.data(), split, 0)) == whole);
    }
}

TEST_CASE("the CRC-32C instruction agrees with the table at every alignment and length") {
  if (!strata::crc32c_hardware_available()) {
    MESSAGE("this CPU has no CRC-32C instruction: crc32c() runs on the table");
    CHECK(std::string(strata::crc32c_implementation()) == "table");
    return;
  }
  CHECK(std::string(strata::crc32c_implementation()) != "table");
  const auto data = random_bytes(200000, 42);
  for (std::size_t start = 0; start < 16; ++start)
    for (std::size_t length = 0; length <= 100; ++length) {
      CAPTURE(start);
      CAPTURE(length);
      REQUIRE(strata::crc32c_hardware(data.data() + start, length) ==
              strata::crc32c_table(data.data() + start, length));
    }
  // Lengths around the interleaved blocks (3 x 256 and 3 x 8192 bytes) and long random ones.
  std::vector<std::size_t> lengths;
  for (std::size_t around : {768, 1536, 24576, 49152})
    for (std::size_t length = around - 9; length <= around + 9; ++length) lengths.push_back(length);
  std::mt19937_64 rng(3);
  for (int i = 0; i < 40; ++i) lengths.push_back(rng() % (data.size() - 16));
  for (std::size_t length : lengths)
    for (std::size_t start : {0, 1, 3, 8, 13}) {
      CAPTURE(start);
      CAPTURE(length);
      REQUIRE(strata::crc32c_hardware(data.data() + start, length, 0x12345678u) ==
              strata::crc32c_table(data.data() + start, length, 0x12345678u));
    }
}
