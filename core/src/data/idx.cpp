// Reader of IDX files (MNIST family), raw or gzip-compressed, through zlib's gz* functions.
//
// Policy on extra bytes: read_idx rejects a file whose data is longer than its header declares.
// Such a file is almost always a wrong or damaged header (or two files concatenated), and
// silently reading a prefix of it would train on garbage. (Bytes after the end of a gzip stream
// that are not another gzip member are skipped by zlib itself and cannot be seen here.)

#include "strata/idx.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <system_error>

#include <zlib.h>

#include "strata/errors.hpp"

namespace strata {
namespace {

namespace fs = std::filesystem;

constexpr const char* kDamagedFix =
    "Make sure the file is a complete IDX file (raw or gzip-compressed); re-download or reinstall "
    "it if it is damaged.";

/// What an IDX type code stands for.
struct IdxType {
  torch::ScalarType dtype;
  std::size_t size;  ///< bytes per element
  const char* name;
};

std::optional<IdxType> idx_type_of(std::uint8_t code) {
  switch (code) {
    case idx_type::kUInt8: return IdxType{torch::kUInt8, 1, "unsigned byte"};
    case idx_type::kInt8: return IdxType{torch::kInt8, 1, "signed byte"};
    case idx_type::kInt16: return IdxType{torch::kInt16, 2, "int16"};
    case idx_type::kInt32: return IdxType{torch::kInt32, 4, "int32"};
    case idx_type::kFloat32: return IdxType{torch::kFloat32, 4, "float32"};
    case idx_type::kFloat64: return IdxType{torch::kFloat64, 8, "float64"};
    default: return std::nullopt;
  }
}

std::string hex(std::uint32_t value, int digits) {
  char buffer[16];
  std::snprintf(buffer, sizeof buffer, "0x%0*X", digits, static_cast<unsigned>(value));
  return buffer;
}

std::string shape_text(const std::vector<std::int64_t>& dims) {
  std::string out = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(dims[i]);
  }
  return out + "]";
}

std::string plural(std::uint64_t n, const char* word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

/// A gzFile opened for reading, closed on destruction. Reads raw files transparently.
class GzReader {
 public:
  explicit GzReader(const fs::path& file) : file_(file) {
    std::error_code ec;
    const auto status = fs::status(file, ec);
    if (!fs::exists(status))
      throw Error("IDX file '" + file.string() + "' does not exist",
                  "Check the path (and, for a dataset, its `path` option).");
    if (fs::is_directory(status))
      throw Error("IDX file '" + file.string() + "' is a directory, not a file", "Check the path.");
    gz_ = gzopen(file.c_str(), "rb");
    if (gz_ == nullptr) {
      const int err = errno;
      throw Error("cannot open IDX file '" + file.string() + "': " +
                      (err ? std::strerror(err) : "out of memory"),
                  "Check that the file is readable.");
    }
    gzbuffer(gz_, 1u << 17);  // larger than the 8 KiB default: fewer system calls
  }
  ~GzReader() {
    if (gz_ != nullptr) gzclose(gz_);
  }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  /// Reads up to `size` bytes; fewer only at the end of the data. Throws on a read or
  /// decompression error; a compressed stream that just stops early counts as the end.
  std::size_t read(void* destination, std::size_t size) {
    auto* out = static_cast<unsigned char*>(destination);
    std::size_t total = 0;
    while (total < size) {
      const auto chunk = static_cast<unsigned>(std::min<std::size_t>(size - total, 1u << 30));
      const int got = gzread(gz_, out + total, chunk);
      if (got < 0) {
        int code = Z_OK;
        const char* message = gzerror(gz_, &code);
        const std::string why = code == Z_ERRNO ? std::strerror(errno) : message;
        throw Error("cannot read IDX file '" + file_.string() + "': " + why, kDamagedFix);
      }
      if (got == 0) break;
      total += static_cast<std::size_t>(got);
    }
    return total;
  }

  /// True when zlib saw a compressed stream end before its trailer (a cut-off .gz file).
  bool stream_cut_off() {
    int code = Z_OK;
    gzerror(gz_, &code);
    return code == Z_BUF_ERROR;
  }

  const fs::path& file() const noexcept { return file_; }

 private:
  fs::path file_;
  gzFile gz_ = nullptr;
};

IdxHeader read_header(GzReader& reader) {
  const std::string name = "IDX file '" + reader.file().string() + "'";
  unsigned char magic[4] = {};
  const std::size_t got = reader.read(magic, sizeof magic);
  if (got < sizeof magic)
    throw Error(name + " is too short: it has " + plural(got, "byte") +
                    ", an IDX header needs at least 4",
                kDamagedFix);
  const std::uint32_t magic_value = (std::uint32_t{magic[0]} << 24) | (std::uint32_t{magic[1]} << 16) |
                                    (std::uint32_t{magic[2]} << 8) | std::uint32_t{magic[3]};
  if (magic[0] != 0 || magic[1] != 0)
    throw Error(name + " has a bad magic number " + hex(magic_value, 8) +
                    ": an IDX file starts with two zero bytes, a type code and a dimension count",
                "Check that this is an IDX file (such as train-images-idx3-ubyte[.gz]) and that "
                "it is not damaged.");
  IdxHeader header;
  header.type_code = magic[2];
  if (!idx_type_of(header.type_code))
    throw Error(name + " has an unknown element type code " + hex(header.type_code, 2) +
                    " (known: 0x08 unsigned byte, 0x09 signed byte, 0x0B int16, 0x0C int32, "
                    "0x0D float32, 0x0E float64)",
                kDamagedFix);
  const std::size_t ndims = magic[3];
  std::vector<unsigned char> raw(4 * ndims);
  const std::size_t dims_got = reader.read(raw.data(), raw.size());
  if (dims_got < raw.size())
    throw Error(name + " has a truncated header: it declares " + plural(ndims, "dimension") +
                    " (" + std::to_string(raw.size()) + " bytes of sizes after the magic), but only " +
                    plural(dims_got, "byte") + " follow",
                kDamagedFix);
  header.dims.reserve(ndims);
  for (std::size_t i = 0; i < ndims; ++i) {
    const unsigned char* b = raw.data() + 4 * i;
    const std::uint32_t dim = (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) |
                              (std::uint32_t{b[2]} << 8) | std::uint32_t{b[3]};
    header.dims.push_back(static_cast<std::int64_t>(dim));
  }
  return header;
}

/// Bytes of data a header declares; throws when that does not fit in memory sizes.
std::size_t data_bytes(const IdxHeader& header, const fs::path& file) {
  std::uint64_t bytes = idx_type_of(header.type_code)->size;
  for (const auto dim : header.dims) {
    if (dim != 0 && bytes > std::numeric_limits<std::int64_t>::max() / static_cast<std::uint64_t>(dim))
      throw Error("IDX file '" + file.string() + "' declares an impossibly large shape " +
                      shape_text(header.dims),
                  kDamagedFix);
    bytes *= static_cast<std::uint64_t>(dim);
  }
  return static_cast<std::size_t>(bytes);
}

template <class U>
void swap_bytes(void* data, std::size_t count) {
  auto* p = static_cast<U*>(data);
  for (std::size_t i = 0; i < count; ++i) {
    if constexpr (sizeof(U) == 2) p[i] = __builtin_bswap16(p[i]);
    else if constexpr (sizeof(U) == 4) p[i] = __builtin_bswap32(p[i]);
    else p[i] = __builtin_bswap64(p[i]);
  }
}

/// Converts `count` big-endian elements of `size` bytes to native order, in place.
void big_endian_to_native(void* data, std::size_t count, std::size_t size) {
  if constexpr (std::endian::native == std::endian::big) return;
  switch (size) {
    case 2: swap_bytes<std::uint16_t>(data, count); break;
    case 4: swap_bytes<std::uint32_t>(data, count); break;
    case 8: swap_bytes<std::uint64_t>(data, count); break;
    default: break;  // single bytes have no order
  }
}

}  // namespace

IdxHeader read_idx_header(const std::filesystem::path& file) {
  GzReader reader(file);
  return read_header(reader);
}

torch::Tensor read_idx(const std::filesystem::path& file) {
  GzReader reader(file);
  const IdxHeader header = read_header(reader);
  const IdxType type = *idx_type_of(header.type_code);
  const std::size_t expected = data_bytes(header, file);

  torch::Tensor tensor = torch::empty(header.dims, torch::TensorOptions().dtype(type.dtype));
  const std::size_t found = reader.read(tensor.data_ptr(), expected);
  if (found < expected)
    throw Error("IDX file '" + file.string() + "' is truncated: its header declares shape " +
                    shape_text(header.dims) + " of " + type.name + ", which is " +
                    std::to_string(expected) + " bytes of data, but it has only " +
                    std::to_string(found) + " bytes of data" +
                    (reader.stream_cut_off() ? " (its gzip stream is cut off)" : ""),
                kDamagedFix);
  unsigned char extra = 0;
  if (reader.read(&extra, 1) != 0)
    throw Error("IDX file '" + file.string() + "' has more data than its header declares (shape " +
                    shape_text(header.dims) + " of " + type.name + ", " + std::to_string(expected) +
                    " bytes): the header is damaged or the file is not a single IDX file",
                kDamagedFix);
  big_endian_to_native(tensor.data_ptr(), static_cast<std::size_t>(tensor.numel()), type.size);
  return tensor;
}

}  // namespace strata
