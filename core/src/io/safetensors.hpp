#pragma once
// Safetensors files, the Hugging Face tensor format: an 8-byte little-endian header length N, N
// bytes of JSON header {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
// {str: str}}, then the byte buffer the offsets point into (relative to its start).
//
// SafetensorsFile validates the whole header when it opens a file and then reads only the tensors
// asked for (pread of their byte ranges), so loading a few tensors of a large file costs their
// bytes only. write_safetensors writes atomically (temporary name, fsync, rename) in the layout of
// the reference implementation (header padded with spaces to a multiple of 8, tensors ordered by
// decreasing element size so every tensor is aligned to its element size).

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

namespace strata {

/// One tensor of a safetensors header, validated.
struct SafetensorsEntry {
  std::string name;
  std::string dtype;                 ///< as the file spells it: "F32", "BF16", "I64", ...
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;           ///< byte offset of the data in the file (header included)
  std::uint64_t bytes = 0;           ///< data size in bytes = numel * element size
};

/// An open safetensors file whose header has been checked: the header length lies within the
/// file, the header is a JSON object, every dtype is known, every byte range lies in the buffer,
/// matches numel * element size and overlaps no other. Every error (strata::Error) names the
/// file and, where one is concerned, the tensor.
class SafetensorsFile {
 public:
  /// Opens `file` and validates its header. Throws strata::Error.
  explicit SafetensorsFile(const std::filesystem::path& file);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::filesystem::path& path() const noexcept { return path_; }
  /// The tensors in header order.
  const std::vector<SafetensorsEntry>& entries() const noexcept { return entries_; }
  /// The entry named `name`, or nullptr.
  const SafetensorsEntry* find(const std::string& name) const;
  /// The header's "__metadata__" (empty when absent).
  const std::map<std::string, std::string>& metadata() const noexcept { return metadata_; }
  /// Reads one tensor: a new contiguous CPU tensor of the file's dtype and shape (BOOL bytes
  /// other than 0 read as true). Throws strata::Error naming the file and tensor when it is not
  /// in the file or cannot be read.
  torch::Tensor read(const std::string& name) const;

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, std::size_t> index_;  // name -> position in entries_
  std::map<std::string, std::string> metadata_;
};

/// The LibTorch dtype of a safetensors dtype name ("BF16" -> kBFloat16); throws strata::Error
/// listing the known names for an unknown one.
torch::ScalarType safetensors_dtype(const std::string& name);
/// The safetensors name of a LibTorch dtype (kFloat -> "F32"); throws strata::Error when the
/// format has none.
std::string safetensors_dtype_name(torch::ScalarType dtype);

/// Writes `tensors` (any device and layout: each is copied to contiguous CPU memory as it is
/// written) with `metadata` as "__metadata__" to `file` through an AtomicFile: every write and the
/// fsync checked, then renamed into place. Names must be unique and non-empty. Throws strata::Error
/// naming the file (and the tensor, or the system's error text).
void write_safetensors(const std::filesystem::path& file,
                       const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace strata
