// Tests of the IDX reader (strata/idx.hpp): raw and gzip files written here, every element
// type's byte order, and the error messages for missing, foreign, truncated and overlong files.

#include "test_support.hpp"

#include <atomic>
#include <bit>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>
#include <zlib.h>

#include "strata/errors.hpp"
#include "strata/idx.hpp"

namespace fs = std::filesystem;

namespace {

using strata::test::TempDir;

using Bytes = std::vector<unsigned char>;

void append_be32(Bytes& out, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<unsigned char>(v >> shift));
}

/// Big-endian bytes of each element (integers or IEEE floats).
template <class T>
Bytes big_endian(const std::vector<T>& values) {
  Bytes out;
  for (const T& v : values) {
    unsigned char raw[sizeof(T)];
    std::memcpy(raw, &v, sizeof(T));
    if constexpr (std::endian::native == std::endian::little)
      for (std::size_t i = sizeof(T); i-- > 0;) out.push_back(raw[i]);
    else
      out.insert(out.end(), raw, raw + sizeof(T));
  }
  return out;
}

/// A complete IDX file image: magic, dims, payload.
Bytes idx_bytes(std::uint8_t type_code, const std::vector<std::uint32_t>& dims, const Bytes& payload) {
  Bytes out = {0, 0, type_code, static_cast<unsigned char>(dims.size())};
  for (const auto d : dims) append_be32(out, d);
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

void write_raw(const fs::path& file, const Bytes& bytes) {
  std::ofstream out(file, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

void write_gz(const fs::path& file, const Bytes& bytes) {
  gzFile gz = gzopen(file.c_str(), "wb");
  REQUIRE(gz != nullptr);
  if (!bytes.empty())
    REQUIRE(gzwrite(gz, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
  REQUIRE(gzclose(gz) == Z_OK);
}

using strata::test::error_of;

/// The element type as LibTorch names it ("Byte", "Float", ...): readable when a check fails.
std::string dtype_of(const torch::Tensor& t) { return c10::toString(t.scalar_type()); }

const std::vector<std::uint8_t> kImagePixels = {0, 1, 2, 3, 10, 20, 30, 40, 200, 250, 254, 255};
const std::vector<std::uint8_t> kLabels = {7, 0, 9};

}  // namespace

TEST_CASE("idx: uint8 images and labels, raw and gzip-compressed") {
  TempDir dir;
  const Bytes images = idx_bytes(0x08, {3, 2, 2}, Bytes(kImagePixels.begin(), kImagePixels.end()));
  const Bytes labels = idx_bytes(0x08, {3}, Bytes(kLabels.begin(), kLabels.end()));
  write_raw(dir / "images-idx3-ubyte", images);
  write_gz(dir / "images-idx3-ubyte.gz", images);
  write_raw(dir / "labels-idx1-ubyte", labels);
  write_gz(dir / "labels-idx1-ubyte.gz", labels);

  for (const char* name : {"images-idx3-ubyte", "images-idx3-ubyte.gz"}) {
    CAPTURE(name);
    const auto header = strata::read_idx_header(dir / name);
    CHECK(header.type_code == 0x08);
    CHECK(header.dims == std::vector<std::int64_t>{3, 2, 2});
    const torch::Tensor t = strata::read_idx(dir / name);
    CHECK(dtype_of(t) == "Byte");
    CHECK(t.device().is_cpu());
    CHECK(t.is_contiguous());
    CHECK(t.sizes().vec() == std::vector<std::int64_t>{3, 2, 2});
    const auto* data = t.data_ptr<std::uint8_t>();
    CHECK(std::vector<std::uint8_t>(data, data + t.numel()) == kImagePixels);
    CHECK(t[2][1][0].item<int>() == 254);
  }
  for (const char* name : {"labels-idx1-ubyte", "labels-idx1-ubyte.gz"}) {
    CAPTURE(name);
    const auto header = strata::read_idx_header(dir / name);
    CHECK(header.dims == std::vector<std::int64_t>{3});
    const torch::Tensor t = strata::read_idx(dir / name);
    CHECK(t.sizes().vec() == std::vector<std::int64_t>{3});
    CHECK(t[0].item<int>() == 7);
    CHECK(t[1].item<int>() == 0);
    CHECK(t[2].item<int>() == 9);
  }
}

TEST_CASE("idx: a gzip file without the .gz suffix is still decompressed") {
  TempDir dir;
  write_gz(dir / "labels", idx_bytes(0x08, {3}, Bytes(kLabels.begin(), kLabels.end())));
  const torch::Tensor t = strata::read_idx(dir / "labels");
  CHECK(t.sizes().vec() == std::vector<std::int64_t>{3});
  CHECK(t[0].item<int>() == 7);
}

TEST_CASE("idx: multi-byte types are converted from big-endian") {
  TempDir dir;
  SUBCASE("float32") {
    const std::vector<float> values = {1.5f, -2.25f, 3.0e10f, 0.0f, -0.0f, 1.0e-30f};
    write_gz(dir / "f.gz", idx_bytes(0x0D, {2, 3}, big_endian(values)));
    const torch::Tensor t = strata::read_idx(dir / "f.gz");
    CHECK(dtype_of(t) == "Float");
    CHECK(t.sizes().vec() == std::vector<std::int64_t>{2, 3});
    const float* data = t.data_ptr<float>();
    for (std::size_t i = 0; i < values.size(); ++i) CHECK(std::memcmp(&data[i], &values[i], 4) == 0);
    CHECK(t[1][0].item<float>() == 0.0f);
  }
  SUBCASE("float64") {
    const std::vector<double> values = {3.141592653589793, -1e300, 0.1};
    write_raw(dir / "d", idx_bytes(0x0E, {3}, big_endian(values)));
    const torch::Tensor t = strata::read_idx(dir / "d");
    CHECK(dtype_of(t) == "Double");
    for (std::size_t i = 0; i < values.size(); ++i) CHECK(t[i].item<double>() == values[i]);
  }
  SUBCASE("int32") {
    const std::vector<std::int32_t> values = {1, -1, 0x01020304, -2147483647 - 1};
    write_raw(dir / "i", idx_bytes(0x0C, {2, 2}, big_endian(values)));
    const torch::Tensor t = strata::read_idx(dir / "i");
    CHECK(dtype_of(t) == "Int");
    CHECK(std::vector<std::int32_t>(t.data_ptr<std::int32_t>(), t.data_ptr<std::int32_t>() + 4) == values);
  }
  SUBCASE("int16 and int8") {
    const std::vector<std::int16_t> shorts = {-2, 258, 32767};
    write_raw(dir / "s", idx_bytes(0x0B, {3}, big_endian(shorts)));
    const torch::Tensor s = strata::read_idx(dir / "s");
    CHECK(dtype_of(s) == "Short");
    CHECK(std::vector<std::int16_t>(s.data_ptr<std::int16_t>(), s.data_ptr<std::int16_t>() + 3) == shorts);

    write_raw(dir / "b", idx_bytes(0x09, {2}, Bytes{0xFF, 0x05}));
    const torch::Tensor b = strata::read_idx(dir / "b");
    CHECK(dtype_of(b) == "Char");
    CHECK(b[0].item<int>() == -1);
    CHECK(b[1].item<int>() == 5);
  }
}

TEST_CASE("idx: a zero-size dimension gives an empty tensor") {
  TempDir dir;
  write_raw(dir / "empty", idx_bytes(0x08, {0, 28, 28}, {}));
  const torch::Tensor t = strata::read_idx(dir / "empty");
  CHECK(t.sizes().vec() == std::vector<std::int64_t>{0, 28, 28});
}

TEST_CASE("idx: errors name the file and what is wrong") {
  TempDir dir;

  SUBCASE("missing file") {
    const fs::path file = dir / "no-such-file.gz";
    const std::string message = error_of([&] { strata::read_idx(file); });
    CHECK(message.find(file.string()) != std::string::npos);
    CHECK(message.find("does not exist") != std::string::npos);
    CHECK_THROWS_AS(strata::read_idx_header(file), strata::Error);
  }
  SUBCASE("a directory") {
    const std::string message = error_of([&] { strata::read_idx_header(dir.path()); });
    CHECK(message.find("directory") != std::string::npos);
  }
  SUBCASE("bad magic") {
    const fs::path file = dir / "not-idx.txt";
    write_raw(file, Bytes{'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd'});
    const std::string message = error_of([&] { strata::read_idx_header(file); });
    CHECK(message.find(file.string()) != std::string::npos);
    CHECK(message.find("bad magic number 0x68656C6C") != std::string::npos);
    CHECK_THROWS_WITH_AS(strata::read_idx(file), doctest::Contains("bad magic"), strata::Error);
  }
  SUBCASE("unknown type code") {
    const fs::path file = dir / "odd-type";
    write_raw(file, idx_bytes(0x0A, {1}, Bytes{1}));
    const std::string message = error_of([&] { strata::read_idx_header(file); });
    CHECK(message.find(file.string()) != std::string::npos);
    CHECK(message.find("unknown element type code 0x0A") != std::string::npos);
  }
  SUBCASE("too short for a magic number") {
    const fs::path file = dir / "tiny";
    write_raw(file, Bytes{0, 0});
    const std::string message = error_of([&] { strata::read_idx_header(file); });
    CHECK(message.find(file.string()) != std::string::npos);
    CHECK(message.find("too short") != std::string::npos);
  }
  SUBCASE("truncated header") {
    const fs::path file = dir / "short-header";
    Bytes bytes = idx_bytes(0x08, {3, 2, 2}, {});
    bytes.resize(4 + 6);  // 1.5 of 3 dimension sizes
    write_raw(file, bytes);
    const std::string message = error_of([&] { strata::read_idx_header(file); });
    CHECK(message.find(file.string()) != std::string::npos);
    CHECK(message.find("truncated header") != std::string::npos);
    CHECK(message.find("3 dimensions") != std::string::npos);
  }
  SUBCASE("truncated payload, raw and gzip") {
    const Bytes full = idx_bytes(0x08, {3, 2, 2}, Bytes(kImagePixels.begin(), kImagePixels.end()));
    const Bytes cut(full.begin(), full.end() - 5);  // 7 of the 12 data bytes
    for (const bool gz : {false, true}) {
      CAPTURE(gz);
      const fs::path file = dir / (gz ? "cut.gz" : "cut");
      gz ? write_gz(file, cut) : write_raw(file, cut);
      CHECK(strata::read_idx_header(file).dims == std::vector<std::int64_t>{3, 2, 2});  // header is fine
      const std::string message = error_of([&] { strata::read_idx(file); });
      CHECK(message.find(file.string()) != std::string::npos);
      CHECK(message.find("truncated") != std::string::npos);
      CHECK(message.find("12 bytes") != std::string::npos);
      CHECK(message.find("only 7 bytes") != std::string::npos);
    }
  }
  SUBCASE("a gzip stream cut off in the middle") {
    std::vector<unsigned char> pixels(4096);
    std::mt19937 rng(1);
    for (auto& p : pixels) p = static_cast<unsigned char>(rng());
    const fs::path whole = dir / "whole.gz";
    write_gz(whole, idx_bytes(0x08, {16, 16, 16}, Bytes(pixels.begin(), pixels.end())));
    std::ifstream in(whole, std::ios::binary);
    Bytes compressed((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    compressed.resize(compressed.size() / 2);
    const fs::path file = dir / "half.gz";
    write_raw(file, compressed);
    const std::string message = error_of([&] { strata::read_idx(file); });
    CHECK(message.find(file.string()) != std::string::npos);
    CHECK(message.find("truncated") != std::string::npos);
    CHECK(message.find("4096 bytes") != std::string::npos);
  }
  SUBCASE("more data than declared") {
    const fs::path file = dir / "long";
    write_raw(file, idx_bytes(0x08, {3}, Bytes{1, 2, 3, 4}));
    const std::string message = error_of([&] { strata::read_idx(file); });
    CHECK(message.find(file.string()) != std::string::npos);
    CHECK(message.find("more data than its header declares") != std::string::npos);
    CHECK(message.find("1 trailing byte") != std::string::npos);
  }
  SUBCASE("gzip: trailer cut off, trailer damaged, bytes after the stream, two members") {
    const Bytes full = idx_bytes(0x08, {3, 2, 2}, Bytes(kImagePixels.begin(), kImagePixels.end()));
    write_gz(dir / "good.gz", full);
    std::ifstream in(dir / "good.gz", std::ios::binary);
    const Bytes good((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto message_for = [&](const std::string& name, const Bytes& bytes) {
      write_raw(dir / name, bytes);
      const std::string message = error_of([&] { strata::read_idx(dir / name); });
      CHECK(message.find((dir / name).string()) != std::string::npos);
      return message;
    };
    const Bytes no_trailer(good.begin(), good.end() - 3);  // the data is whole, its ISIZE is not
    CHECK(message_for("cut_trailer.gz", no_trailer).find("cut off before the trailer") != std::string::npos);
    Bytes bad_crc = good;
    bad_crc[bad_crc.size() - 8] ^= 0xFF;  // first byte of the CRC-32
    CHECK(message_for("bad_crc.gz", bad_crc).find("CRC-32") != std::string::npos);
    Bytes garbage = good;
    garbage.insert(garbage.end(), {'j', 'u', 'n', 'k', '\n'});
    CHECK(message_for("garbage.gz", garbage).find("5 bytes after the end of its gzip data") != std::string::npos);
    // Two members read as one stream: the header and half the data, then the rest.
    write_gz(dir / "part1.gz", Bytes(full.begin(), full.begin() + 20));
    write_gz(dir / "part2.gz", Bytes(full.begin() + 20, full.end()));
    std::ifstream p1(dir / "part1.gz", std::ios::binary), p2(dir / "part2.gz", std::ios::binary);
    Bytes joined((std::istreambuf_iterator<char>(p1)), std::istreambuf_iterator<char>());
    joined.insert(joined.end(), std::istreambuf_iterator<char>(p2), std::istreambuf_iterator<char>());
    write_raw(dir / "joined.gz", joined);
    CHECK(strata::read_idx(dir / "joined.gz").flatten()[11].item<int>() == 255);
  }
  SUBCASE("errors carry a fix") {
    const fs::path file = dir / "tiny";
    write_raw(file, Bytes{0});
    try {
      strata::read_idx(file);
      FAIL("expected a strata::Error");
    } catch (const strata::Error& e) {
      CHECK_FALSE(e.fix().empty());
    }
  }
}
