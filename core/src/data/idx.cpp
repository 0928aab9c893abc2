// Reader of IDX files (MNIST family), raw or gzip-compressed, through zlib's inflate.
//
// Policy on extra bytes: read_idx rejects a file whose data is longer than its header declares,
// and a gzip file with bytes after its last member. Such a file is almost always a wrong or
// damaged header (or two files concatenated), and silently reading a prefix of it would train on
// garbage. A gzip stream cut off anywhere, even in its 8-byte trailer, is a truncated file.

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
#include "text/shape_text.hpp"

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

std::string plural(std::uint64_t n, const char* word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

/// An IDX file opened for reading, raw or gzip-compressed, closed on destruction. Gzip is told by
/// its magic bytes (1F 8B), not by the name. Several gzip members one after the other (`cat a.gz
/// b.gz`) read as one stream, as with gzip(1); zlib checks each member's trailer (CRC-32 and
/// length). Unlike zlib's gz* functions, which skip bytes after the last member without a word,
/// such bytes are an error here: they are a damaged file or two files joined.
class IdxReader {
 public:
  explicit IdxReader(const fs::path& file) : file_(file), buffer_(std::size_t{1} << 17) {
    std::error_code ec;
    const auto status = fs::status(file, ec);
    if (!fs::exists(status))
      throw Error("IDX file '" + file.string() + "' does not exist",
                  "Check the path (and, for a dataset, its `path` option).");
    if (fs::is_directory(status))
      throw Error("IDX file '" + file.string() + "' is a directory, not a file", "Check the path.");
    in_ = std::fopen(file.c_str(), "rb");
    if (in_ == nullptr) {
      const int err = errno;
      throw Error("cannot open IDX file '" + file.string() + "': " + std::strerror(err),
                  "Check that the file is readable.");
    }
    fill(2);
    gzip_ = end_ - begin_ >= 2 && buffer_[begin_] == 0x1F && buffer_[begin_ + 1] == 0x8B;
    if (gzip_) {
      if (inflateInit2(&z_, 15 + 16) != Z_OK) {  // 16: a gzip wrapper, not zlib's
        std::fclose(in_);
        throw Error("cannot decompress IDX file '" + file.string() + "': zlib could not start (out of memory)");
      }
      z_open_ = true;
    }
  }
  ~IdxReader() {
    if (z_open_) inflateEnd(&z_);
    if (in_ != nullptr) std::fclose(in_);
  }
  IdxReader(const IdxReader&) = delete;
  IdxReader& operator=(const IdxReader&) = delete;

  /// Reads up to `size` bytes of (decompressed) data; fewer only at the end of the data. Throws
  /// on a read error, corrupt compressed data, a trailer that does not match the data and bytes
  /// after the gzip data; a compressed stream that just stops counts as the end (stream_cut_off).
  std::size_t read(void* destination, std::size_t size) {
    auto* out = static_cast<unsigned char*>(destination);
    return gzip_ ? inflate_into(out, size) : copy_into(out, size);
  }

  /// True when the file ended inside a gzip member (a cut-off .gz file).
  bool stream_cut_off() const noexcept { return cut_off_; }

  const fs::path& file() const noexcept { return file_; }

 private:
  /// Makes at least `wanted` unread bytes available in the buffer (fewer only at the end of the
  /// file) and returns how many there are.
  std::size_t fill(std::size_t wanted) {
    if (end_ - begin_ >= wanted || eof_) return end_ - begin_;
    std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
    while (end_ < wanted && !eof_) {
      const std::size_t got = std::fread(buffer_.data() + end_, 1, buffer_.size() - end_, in_);
      if (got == 0) {
        if (std::ferror(in_))
          throw Error("cannot read IDX file '" + file_.string() + "': " + std::strerror(errno), kDamagedFix);
        eof_ = true;
      }
      end_ += got;
      offset_ += got;
    }
    return end_ - begin_;
  }

  std::size_t copy_into(unsigned char* out, std::size_t size) {
    std::size_t total = 0;
    while (total < size && fill(1) > 0) {
      const std::size_t n = std::min(size - total, end_ - begin_);
      std::memcpy(out + total, buffer_.data() + begin_, n);
      begin_ += n;
      total += n;
    }
    return total;
  }

  std::size_t inflate_into(unsigned char* out, std::size_t size) {
    std::size_t total = 0;
    while (total < size && !finished_) {
      if (fill(1) == 0) {  // the file ends inside a member
        cut_off_ = finished_ = true;
        break;
      }
      const std::size_t room = std::min<std::size_t>(size - total, std::size_t{1} << 30);
      z_.next_in = buffer_.data() + begin_;
      z_.avail_in = static_cast<uInt>(end_ - begin_);
      z_.next_out = out + total;
      z_.avail_out = static_cast<uInt>(room);
      const int rc = ::inflate(&z_, Z_NO_FLUSH);
      begin_ = end_ - z_.avail_in;
      total += room - z_.avail_out;
      if (rc == Z_STREAM_END) next_member();
      else if (rc != Z_OK && rc != Z_BUF_ERROR) throw corrupt(rc);  // Z_BUF_ERROR: needs more input
    }
    return total;
  }

  /// After the end of a member: the end of the file, another member, or an error.
  void next_member() {
    const std::size_t left = fill(2);
    if (left == 0) {
      finished_ = true;
    } else if (left >= 2 && buffer_[begin_] == 0x1F && buffer_[begin_ + 1] == 0x8B) {
      inflateReset(&z_);
    } else {
      const std::uint64_t at = offset_ - left;  // first byte after the gzip data
      std::error_code ec;
      const std::uint64_t size = fs::file_size(file_, ec);
      throw Error("IDX file '" + file_.string() + "' has " + plural(ec ? left : size - at, "byte") +
                      " after the end of its gzip data (which ends at byte " + std::to_string(at) +
                      "): the file is damaged, or more than one file was written into it",
                  kDamagedFix);
    }
  }

  Error corrupt(int rc) const {
    const std::string what = z_.msg != nullptr ? z_.msg : rc == Z_NEED_DICT ? "needs a preset dictionary" : "";
    std::string why;
    if (rc == Z_MEM_ERROR) why = "zlib ran out of memory";
    else if (what == "incorrect data check") why = "the CRC-32 in its gzip trailer does not match the data";
    else if (what == "incorrect length check") why = "the length (ISIZE) in its gzip trailer does not match the data";
    else why = "its gzip data is corrupt (zlib: " + what + ")";
    return Error("cannot decompress IDX file '" + file_.string() + "': " + why + " (near compressed byte " +
                     std::to_string(offset_ - (end_ - begin_)) + "); the file is damaged",
                 kDamagedFix);
  }

  fs::path file_;
  std::FILE* in_ = nullptr;
  std::vector<unsigned char> buffer_;  // unread input is buffer_[begin_, end_)
  std::size_t begin_ = 0;
  std::size_t end_ = 0;
  std::uint64_t offset_ = 0;  // bytes read from the file so far
  bool eof_ = false;
  bool gzip_ = false;
  z_stream z_{};
  bool z_open_ = false;
  bool finished_ = false;  // gzip data ended (at the end of the file or cut off)
  bool cut_off_ = false;
};

IdxHeader read_header(IdxReader& reader) {
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
  IdxReader reader(file);
  return read_header(reader);
}

torch::Tensor read_idx(const std::filesystem::path& file) {
  IdxReader reader(file);
  const IdxHeader header = read_header(reader);
  const IdxType type = *idx_type_of(header.type_code);
  const std::size_t expected = data_bytes(header, file);

  torch::Tensor tensor = torch::empty(header.dims, torch::TensorOptions().dtype(type.dtype));
  const std::size_t found = reader.read(tensor.data_ptr(), expected);
  const std::string declared = std::to_string(expected) + " bytes of data expected after the " +
                               std::to_string(4 + 4 * header.dims.size()) + "-byte header (shape " +
                               shape_text(header.dims) + " of " + type.name + ")";
  if (found < expected)
    throw Error("IDX file '" + file.string() + "' is truncated: " + declared + ", but it has only " +
                    std::to_string(found) + " bytes of data" +
                    (reader.stream_cut_off() ? " (its gzip stream is cut off)" : ""),
                kDamagedFix);
  std::vector<unsigned char> rest(std::size_t{1} << 16);
  std::uint64_t extra = 0;
  for (std::size_t got; (got = reader.read(rest.data(), rest.size())) != 0;) extra += got;
  if (extra != 0)
    throw Error("IDX file '" + file.string() + "' has more data than its header declares: " + declared +
                    ", found " + std::to_string(expected + extra) + " (" + plural(extra, "trailing byte") +
                    "); the header is damaged or the file is not a single IDX file",
                kDamagedFix);
  if (reader.stream_cut_off())
    throw Error("IDX file '" + file.string() + "' is truncated: its data is complete, but its gzip stream "
                    "is cut off before the trailer (CRC-32 and length) that would confirm it",
                kDamagedFix);
  big_endian_to_native(tensor.data_ptr(), static_cast<std::size_t>(tensor.numel()), type.size);
  return tensor;
}

}  // namespace strata
