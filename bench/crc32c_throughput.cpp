// Throughput of CRC-32C (checkpoint files and replica digests checksum every byte with it): the
// byte-by-byte table against the CPU's instruction that strata::crc32c() picks at run time, over
// 256 MiB of random bytes, in calls of 256 MiB (from memory), 1 MiB (in cache), 4 KiB and 64 B;
// best of 5. Both must give the same CRC. Stand-alone, from the repository root:
//
//   c++ -O3 -DNDEBUG -std=c++20 -I core/src bench/crc32c_throughput.cpp core/src/io/crc32c.cpp -o crc32c_throughput
//   ./crc32c_throughput
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "io/crc32c.hpp"

int main() {
  std::vector<unsigned char> buf(std::size_t(256) << 20);
  std::mt19937_64 rng(1);
  for (auto& b : buf) b = static_cast<unsigned char>(rng());
  using Fn = std::uint32_t (*)(const void*, std::size_t, std::uint32_t) noexcept;
  const auto rate = [&](Fn fn, std::size_t piece, std::uint32_t& crc) {  // GB/s, best of 5
    double best = 1e9;
    for (int r = 0; r < 5; ++r) {
      std::uint32_t c = 0;
      const auto t0 = std::chrono::steady_clock::now();
      for (std::size_t o = 0; o < buf.size(); o += piece)
        c = fn(buf.data() + (piece == buf.size() ? 0 : o % (std::size_t(1) << 20)), piece, c);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      crc = c;
    }
    return static_cast<double>(buf.size()) / best / 1e9;
  };
  std::printf("strata::crc32c runs on: %s\n", strata::crc32c_implementation());
  std::printf("%12s %14s %14s\n", "call bytes", "table GB/s", "crc32c GB/s");
  int wrong = 0;
  for (const std::size_t piece : {buf.size(), std::size_t(1) << 20, std::size_t(4096), std::size_t(64)}) {
    std::uint32_t a = 0, b = 0;
    const double table = rate(&strata::crc32c_table, piece, a);
    const double fast = rate(&strata::crc32c, piece, b);
    wrong += a != b;
    std::printf("%12zu %14.2f %14.2f%s\n", piece, table, fast, a == b ? "" : "  CRC DIFFERS");
  }
  return wrong == 0 ? 0 : 1;
}
