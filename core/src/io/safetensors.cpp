#include "io/safetensors.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "io/atomic_file.hpp"
#include "io/json.hpp"
#include "strata/errors.hpp"
#include "text/shape_text.hpp"

namespace strata {

namespace fs = std::filesystem;

// The buffer holds little-endian data, read and written as is.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

// The reference implementation refuses larger headers (MAX_HEADER_SIZE); so do we, before
// allocating anything a damaged length asks for.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;
constexpr double kMaxExactInteger = 9007199254740992.0;  // 2^53: JSON numbers arrive as doubles

struct DtypeName {
  const char* name;
  torch::ScalarType type;
};
constexpr DtypeName kDtypes[] = {
    {"F64", torch::kDouble},        {"F32", torch::kFloat},         {"F16", torch::kHalf},
    {"BF16", torch::kBFloat16},     {"I64", torch::kLong},          {"I32", torch::kInt},
    {"I16", torch::kShort},         {"I8", torch::kChar},           {"U8", torch::kByte},
    {"BOOL", torch::kBool},         {"U64", torch::kUInt64},        {"U32", torch::kUInt32},
    {"U16", torch::kUInt16},        {"F8_E5M2", torch::kFloat8_e5m2}, {"F8_E4M3", torch::kFloat8_e4m3fn},
    {"F8_E8M0", torch::kFloat8_e8m0fnu}, {"C64", torch::kComplexFloat},
};

std::string known_dtypes() {
  std::string out;
  for (const auto& d : kDtypes) out += (out.empty() ? "" : ", ") + std::string(d.name);
  return out;
}

const DtypeName* find_dtype(const std::string& name) {
  for (const auto& d : kDtypes)
    if (name == d.name) return &d;
  return nullptr;
}

/// A non-negative integer that a double holds exactly, or nothing.
std::optional<std::uint64_t> whole_number(const Json& value) {
  if (!value.is_number()) return std::nullopt;
  const double d = value.number_or(-1);
  if (!(d >= 0) || d != std::floor(d) || d > kMaxExactInteger) return std::nullopt;
  return static_cast<std::uint64_t>(d);
}

}  // namespace

torch::ScalarType safetensors_dtype(const std::string& name) {
  if (const auto* d = find_dtype(name)) return d->type;
  throw Error(fmt::format("unknown safetensors dtype \"{}\" (known: {}).", name, known_dtypes()));
}

std::string safetensors_dtype_name(torch::ScalarType dtype) {
  for (const auto& d : kDtypes)
    if (dtype == d.type) return d.name;
  throw Error(fmt::format("safetensors has no dtype for {}.", c10::toString(dtype)),
              "Convert the tensor to a supported dtype (" + known_dtypes() + ").");
}

// ---- reading --------------------------------------------------------------------------------

SafetensorsFile::SafetensorsFile(const fs::path& file) : path_(file) {
  const std::string where = file.string();
  const std::string fix = "Check that the file is a complete safetensors file (download or copy it again).";
  fd_ = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0)
    throw Error(fmt::format("cannot open {}: {}.", where, errno_text()), "Check the path and its permissions.");
  try {
    struct stat info {};
    if (::fstat(fd_, &info) != 0) throw Error(fmt::format("cannot read {}: {}.", where, errno_text()));
    const auto file_bytes = static_cast<std::uint64_t>(info.st_size);
    if (file_bytes < 8)
      throw Error(fmt::format("{} is not a safetensors file: it has {} bytes, fewer than the 8 of the header length.",
                              where, file_bytes), fix);
    unsigned char prefix[8];
    if (!pread_all(fd_, prefix, 8, 0)) throw Error(fmt::format("cannot read {}: {}.", where, errno_text()), fix);
    std::uint64_t header_bytes = 0;
    for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | prefix[i];
    if (header_bytes > file_bytes - 8)
      throw Error(fmt::format("{} is not a safetensors file or is truncated: its header length is {} bytes, but "
                              "only {} bytes follow it.", where, header_bytes, file_bytes - 8), fix);
    if (header_bytes > kMaxHeaderBytes)
      throw Error(fmt::format("{}: the header length {} exceeds the format's limit of {} bytes.", where,
                              header_bytes, kMaxHeaderBytes), fix);
    std::string text(static_cast<std::size_t>(header_bytes), '\0');
    if (!pread_all(fd_, text.data(), header_bytes, 8))
      throw Error(fmt::format("cannot read the header of {}: {}.", where, errno ? errno_text() : "file too short"),
                  fix);
    Json header;
    try {
      header = Json::parse(text);
    } catch (const Error& e) {
      throw Error(fmt::format("{}: the header is not valid JSON ({}).", where, e.what()), fix);
    }
    const auto* members = header.members();
    if (members == nullptr) throw Error(fmt::format("{}: the header is not a JSON object.", where), fix);

    const std::uint64_t buffer_begin = 8 + header_bytes;
    const std::uint64_t buffer_bytes = file_bytes - buffer_begin;
    struct Range {
      std::uint64_t begin, end;
      std::size_t entry;
    };
    std::vector<Range> ranges;
    for (const auto& [name, value] : *members) {
      if (name == "__metadata__") {
        const auto* pairs = value.members();
        if (pairs == nullptr) throw Error(fmt::format("{}: __metadata__ is not an object of strings.", where), fix);
        for (const auto& [key, text_value] : *pairs) {
          if (!text_value.is_string())
            throw Error(fmt::format("{}: __metadata__ entry \"{}\" is not a string.", where, key), fix);
          metadata_[key] = text_value.string_or("");
        }
        continue;
      }
      auto bad = [&](const std::string& what) {
        return Error(fmt::format("{}: tensor {} {}.", where, name, what), fix);
      };
      const Json* dtype = value.find("dtype");
      const Json* shape = value.find("shape");
      const Json* offsets = value.find("data_offsets");
      if (value.members() == nullptr || dtype == nullptr || shape == nullptr || offsets == nullptr)
        throw bad("is not an object with dtype, shape and data_offsets");
      SafetensorsEntry entry;
      entry.name = name;
      entry.dtype = dtype->string_or("");
      const auto* type = find_dtype(entry.dtype);
      if (type == nullptr)
        throw bad(fmt::format("has the unknown dtype \"{}\" (known: {})", dtype->string_or(dtype->dump(-1)),
                              known_dtypes()));
      std::uint64_t bytes = c10::elementSize(type->type);
      if (shape->elements() == nullptr) throw bad("has a shape that is not an array");
      for (const auto& dim : *shape->elements()) {
        const auto d = whole_number(dim);
        if (!d) throw bad("has a shape with an entry that is not a non-negative integer");
        if (__builtin_mul_overflow(bytes, *d, &bytes)) throw bad("has a shape too large to address");
        entry.shape.push_back(static_cast<std::int64_t>(*d));
      }
      const auto* pair = offsets->elements();
      if (pair == nullptr || pair->size() != 2) throw bad("has data_offsets that are not [begin, end]");
      const auto begin = whole_number((*pair)[0]), end = whole_number((*pair)[1]);
      if (!begin || !end || *end < *begin)
        throw bad("has data_offsets that are not non-negative integers [begin, end] with begin <= end");
      if (*end > buffer_bytes)
        throw bad(fmt::format("lies beyond the end of the data: bytes [{}, {}) of a {}-byte buffer (the file is "
                              "truncated or damaged)", *begin, *end, buffer_bytes));
      if (*end - *begin != bytes)
        throw bad(fmt::format("has {} bytes of data, but {} {} takes {} bytes", *end - *begin, entry.dtype,
                              shape_text(entry.shape), bytes));
      entry.begin = buffer_begin + *begin;
      entry.bytes = bytes;
      if (bytes > 0) ranges.push_back({*begin, *end, entries_.size()});
      index_[name] = entries_.size();
      entries_.push_back(std::move(entry));
    }
    std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
    for (std::size_t i = 1; i < ranges.size(); ++i) {
      const auto& previous = ranges[i - 1];
      if (ranges[i].begin < previous.end)
        throw Error(fmt::format("{}: tensors {} (bytes [{}, {})) and {} (bytes [{}, {})) overlap.", where,
                                entries_[previous.entry].name, previous.begin, previous.end,
                                entries_[ranges[i].entry].name, ranges[i].begin, ranges[i].end), fix);
    }
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

torch::Tensor SafetensorsFile::read(const std::string& name) const {
  const auto* entry = find(name);
  if (entry == nullptr) throw Error(fmt::format("{} has no tensor {}.", path_.string(), name));
  const auto type = safetensors_dtype(entry->dtype);
  // Bytes other than 0 and 1 in a bool tensor are undefined behaviour for LibTorch: read bytes.
  auto tensor = torch::empty(entry->shape, torch::TensorOptions().dtype(type == torch::kBool ? torch::kByte : type));
  if (entry->bytes > 0 && !pread_all(fd_, tensor.data_ptr(), entry->bytes, entry->begin))
    throw Error(fmt::format("cannot read tensor {} of {}: {}.", name, path_.string(),
                            errno ? errno_text() : "the file ends before its data (truncated?)"),
                "Check that the file is complete.");
  return type == torch::kBool ? tensor.ne(0) : tensor;
}

// ---- writing --------------------------------------------------------------------------------

void write_safetensors(const fs::path& file, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string where = file.string();
  std::set<std::string> names;
  for (const auto& [name, tensor] : tensors) {
    if (name.empty() || name == "__metadata__")
      throw Error(fmt::format("cannot write {}: \"{}\" is not a usable tensor name.", where, name));
    if (!names.insert(name).second) throw Error(fmt::format("cannot write {}: tensor {} appears twice.", where, name));
    if (!tensor.defined()) throw Error(fmt::format("cannot write {}: tensor {} is undefined.", where, name));
  }
  // Larger elements first (stable: the given order within a size), as the reference orders them:
  // with a header padded to 8 bytes, every tensor then starts at a multiple of its element size.
  std::vector<std::size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return tensors[a].second.element_size() > tensors[b].second.element_size();
  });

  Json header = Json::object();
  if (!metadata.empty()) {
    Json pairs = Json::object();
    for (const auto& [key, value] : metadata) pairs[key] = value;
    header["__metadata__"] = std::move(pairs);
  }
  std::int64_t offset = 0;
  for (const auto i : order) {
    const auto& [name, tensor] = tensors[i];
    std::string dtype;
    try {
      dtype = safetensors_dtype_name(tensor.scalar_type());
    } catch (const Error& e) {
      throw Error(fmt::format("cannot write tensor {} to {}: {}", name, where, e.what()), e.fix());
    }
    const auto bytes = static_cast<std::int64_t>(tensor.numel() * tensor.element_size());
    Json shape = Json::array();
    for (const auto d : tensor.sizes()) shape.push_back(Json(static_cast<std::int64_t>(d)));
    Json& entry = header[name];
    entry["dtype"] = dtype;
    entry["shape"] = std::move(shape);
    entry["data_offsets"] = Json::Array{Json(offset), Json(offset + bytes)};
    offset += bytes;
  }
  std::string text = header.dump(-1);
  text.append((8 - text.size() % 8) % 8, ' ');

  AtomicFile out(file);
  unsigned char prefix[8];
  const auto header_bytes = static_cast<std::uint64_t>(text.size());
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<unsigned char>(header_bytes >> (8 * i));
  out.write(prefix, sizeof prefix, "the header length");
  out.write(text.data(), text.size(), "the header");
  for (const auto i : order) {
    const auto& [name, tensor] = tensors[i];
    // One tensor at a time on the host, so writing costs at most one extra copy of the largest.
    const auto host = tensor.detach().to(torch::kCPU).contiguous();
    out.write(host.data_ptr(), static_cast<std::uint64_t>(host.numel() * host.element_size()), "tensor " + name);
  }
  out.commit();
}

}  // namespace strata
