// Dataset plugin `fashion_mnist`: Zalando's Fashion-MNIST, 28x28 grayscale images of clothing in
// 10 classes (60,000 training and 10,000 test images), read from the four IDX files
// (`train-images-idx3-ubyte[.gz]`, ... as installed by Debian's `dataset-fashion-mnist`).
// The factory checks the files (so `strata validate` finds a damaged one) without decompressing
// the images: their headers, their sizes against the headers (a raw file's size, a gzip file's
// recorded length), and every label (the label files are small, so they are read whole). The
// pixels are loaded on first use and kept as uint8; that read checks the images' gzip CRC-32.

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <torch/types.h>

#include "strata/dataset.hpp"
#include "strata/errors.hpp"
#include "strata/idx.hpp"
#include "strata/options.hpp"
#include "strata/plugin.hpp"
#include "strata/registry.hpp"
#include "text_files.hpp"

namespace {

namespace fs = std::filesystem;
using strata::tokenizer::quoted;

constexpr const char* kEnvVar = "STRATA_FASHION_MNIST_DIR";
constexpr const char* kDefaultDir = "/usr/share/datasets/fashion-mnist";
constexpr std::int64_t kSide = 28;
constexpr std::int64_t kNumClasses = 10;
constexpr double kMean = 0.2860;  // of the training pixels scaled to [0, 1]
constexpr double kStd = 0.3530;

constexpr const char* kInstallFix =
    "Install Debian's Fashion-MNIST package (`apt-get install dataset-fashion-mnist`), or point "
    "`[dataset] path` (or the STRATA_FASHION_MNIST_DIR environment variable) at a directory "
    "holding train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz "
    "and t10k-labels-idx1-ubyte.gz (or the same names without .gz).";

constexpr const char* kDamagedFix =
    "The file is damaged: re-download it or reinstall Debian's package (`apt-get install --reinstall "
    "dataset-fashion-mnist`), or point `[dataset] path` at a directory holding a complete copy.";

/// Options of the `fashion_mnist` dataset.
struct FashionMnistOptions {
  std::string path;            ///< data directory; "" = $STRATA_FASHION_MNIST_DIR or the Debian one
  bool normalize = true;       ///< standardize pixels with the training mean and std
  std::int64_t train_limit = 0;  ///< use only the first N training examples; 0 = all
  std::int64_t eval_limit = 0;   ///< use only the first N test examples; 0 = all
};

/// Where the data directory came from, for messages.
struct DataDir {
  fs::path dir;
  std::string origin;  ///< "[dataset] path", "$STRATA_FASHION_MNIST_DIR" or "the default"
};

DataDir resolve_dir(const FashionMnistOptions& options, const strata::DatasetContext& context) {
  if (!options.path.empty()) {
    fs::path dir = options.path;
    if (dir.is_relative() && !context.config_dir.empty()) dir = context.config_dir / dir;
    return {dir.lexically_normal(), "[dataset] path"};
  }
  if (const char* env = std::getenv(kEnvVar); env != nullptr && *env != '\0')
    return {fs::path(env), std::string("$") + kEnvVar};
  return {fs::path(kDefaultDir), "the default"};
}

/// The IDX file `base` or `base.gz` in `dir` (the compressed one first); empty when neither exists.
fs::path find_file(const fs::path& dir, const std::string& base) {
  std::error_code ec;
  for (const auto& candidate : {dir / (base + ".gz"), dir / base})
    if (fs::is_regular_file(candidate, ec)) return candidate;
  return {};
}

/// The two files of one split and how many examples of it are used.
struct SplitFiles {
  fs::path images;
  fs::path labels;
  std::int64_t available = 0;  ///< examples in the files
  std::int64_t used = 0;       ///< examples served (after the limit)
};

/// Images and labels of one split, in memory.
struct SplitData {
  torch::Tensor images;  ///< uint8 [n, 28, 28]
  torch::Tensor labels;  ///< int64 [n]
};

std::string shape_text(const std::vector<std::int64_t>& dims) {
  std::string out = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) out += (i ? ", " : "") + std::to_string(dims[i]);
  return out + "]";
}

/// Fashion-MNIST in memory, loaded on the first get().
class FashionMnist final : public strata::Dataset {
 public:
  FashionMnist(SplitFiles train, SplitFiles eval, bool normalize)
      : train_(std::move(train)), eval_(std::move(eval)), normalize_(normalize) {}

  std::int64_t size(strata::Split split) const override { return files(split).used; }

  strata::Batch get(strata::Split split, const torch::Tensor& indices) const override {
    std::call_once(loaded_, [this] { load(); });
    const SplitData& data = split == strata::Split::kTrain ? train_data_ : eval_data_;
    const torch::Tensor index = indices.to(torch::kLong).reshape({-1});
    const std::int64_t n = index.size(0);
    torch::Tensor inputs = data.images.index_select(0, index).to(torch::kFloat32).div_(255.0);
    if (normalize_) inputs.sub_(kMean).div_(kStd);
    return {inputs.view({n, 1, kSide, kSide}), data.labels.index_select(0, index), {}};
  }

  strata::DataSpec spec() const override {
    strata::DataSpec s;
    s.input_shape = {1, kSide, kSide};
    s.num_classes = kNumClasses;
    return s;
  }

 private:
  const SplitFiles& files(strata::Split split) const {
    return split == strata::Split::kTrain ? train_ : eval_;
  }

  /// Reads one split's files, checking them again (they may have changed since the factory).
  static SplitData load_split(const SplitFiles& files) {
    torch::Tensor images = strata::read_idx(files.images);
    torch::Tensor labels = strata::read_idx(files.labels);
    const std::vector<std::int64_t> image_shape{files.available, kSide, kSide};
    if (images.scalar_type() != torch::kUInt8 || images.sizes().vec() != image_shape)
      throw strata::Error("Fashion-MNIST file " + quoted(files.images) + " changed since it was opened: " +
                              "now of shape " + shape_text(images.sizes().vec()) + ", expected uint8 " +
                              shape_text(image_shape),
                          kInstallFix);
    if (labels.scalar_type() != torch::kUInt8 || labels.sizes().vec() != std::vector<std::int64_t>{files.available})
      throw strata::Error("Fashion-MNIST file " + quoted(files.labels) + " changed since it was opened: " +
                              "now of shape " + shape_text(labels.sizes().vec()) + ", expected uint8 [" +
                              std::to_string(files.available) + "]",
                          kInstallFix);
    if (files.used < files.available) {
      // Copies, so that the unused rest of the file is freed.
      images = images.narrow(0, 0, files.used).clone();
      labels = labels.narrow(0, 0, files.used);
    }
    if (files.used > 0) {
      const auto largest = labels.max().item<std::int64_t>();
      if (largest >= kNumClasses)
        throw strata::Error("Fashion-MNIST file " + quoted(files.labels) + " holds label " +
                                std::to_string(largest) + "; labels must be in [0, 9]",
                            kInstallFix);
    }
    return {images, labels.to(torch::kLong)};
  }

  void load() const {
    train_data_ = load_split(train_);
    eval_data_ = load_split(eval_);
  }

  SplitFiles train_;
  SplitFiles eval_;
  bool normalize_;
  mutable std::once_flag loaded_;
  mutable SplitData train_data_;
  mutable SplitData eval_data_;
};

/// strata::read_idx(file), its errors as OptionError("path") (a damaged file).
torch::Tensor read_checked(const fs::path& file) {
  try {
    return strata::read_idx(file);
  } catch (const strata::Error& e) {
    throw strata::OptionError("path", std::string("Fashion-MNIST: ") + e.what(), kDamagedFix);
  }
}

/// Checks without decompressing that `file` (of uint8 elements) holds what its header declares:
/// the size of a raw file, or, for a gzip file, the length its trailer records (ISIZE, modulo
/// 2^32), which a cut-off .gz file or one with bytes after its end does not end with. `what` names
/// the elements ("images"). A mismatch is reported in numbers; a gzip file is then read whole to
/// say what is wrong (several gzip members, whose last ISIZE is not the total, read fine).
void check_size(const fs::path& file, const strata::IdxHeader& header, const char* what) {
  const auto header_bytes = static_cast<std::uint64_t>(4 + 4 * header.dims.size());
  std::uint64_t data_bytes = 1;
  std::string dims;
  for (const auto d : header.dims) {
    data_bytes *= static_cast<std::uint64_t>(d);
    dims += (dims.empty() ? "" : " x ") + std::to_string(d);
  }
  std::error_code ec;
  const std::uint64_t size = fs::file_size(file, ec);
  if (ec)
    throw strata::OptionError("path", "cannot read the size of " + quoted(file) + ": " + ec.message(), kDamagedFix);
  std::ifstream in(file, std::ios::binary);
  unsigned char magic[2] = {};
  unsigned char trailer[4] = {};
  const bool gzip = size >= 2 && in.read(reinterpret_cast<char*>(magic), 2) && magic[0] == 0x1F && magic[1] == 0x8B;
  if (gzip) {
    // A gzip file is at least a 10-byte header and an 8-byte trailer (CRC-32, ISIZE little-endian).
    if (size >= 18 && in.seekg(static_cast<std::streamoff>(size - 4)) && in.read(reinterpret_cast<char*>(trailer), 4)) {
      const std::uint32_t isize = trailer[0] | (trailer[1] << 8) | (trailer[2] << 16) | (std::uint32_t{trailer[3]} << 24);
      if (isize == static_cast<std::uint32_t>(header_bytes + data_bytes)) return;
    }
    read_checked(file);
    return;
  }
  if (size == header_bytes + data_bytes) return;
  const std::string expected = "Fashion-MNIST file " + quoted(file) + ": " + std::to_string(data_bytes) + " bytes of " +
                               what + " expected after the " + std::to_string(header_bytes) + "-byte header (" + dims +
                               "), found ";
  if (size < header_bytes + data_bytes)
    throw strata::OptionError("path", expected + std::to_string(size - header_bytes) + "; the file is truncated",
                              kDamagedFix);
  throw strata::OptionError("path",
                            expected + std::to_string(size - header_bytes) + ": " +
                                std::to_string(size - header_bytes - data_bytes) +
                                " trailing bytes; the file is damaged or its header is wrong",
                            kDamagedFix);
}

/// Reads a labels file whole (60,000 bytes at most) and checks that every label names a class.
/// A plain loop, not tensor operations: those would start LibTorch's OpenMP threads, which cost
/// `strata validate` more time than the whole check.
void check_labels(const fs::path& file) {
  const torch::Tensor labels = read_checked(file);  // uint8 [n], checked by open_split
  const auto* label = labels.data_ptr<std::uint8_t>();
  std::int64_t first = -1;
  std::int64_t bad = 0;
  for (std::int64_t i = 0; i < labels.numel(); ++i)
    if (label[i] >= kNumClasses && bad++ == 0) first = i;
  if (bad == 0) return;
  throw strata::OptionError("path",
                            "Fashion-MNIST file " + quoted(file) + " holds label " + std::to_string(label[first]) +
                                " at index " + std::to_string(first) +
                                (bad > 1 ? " (and " + std::to_string(bad - 1) + " more out of range)" : std::string()) +
                                "; there are " + std::to_string(kNumClasses) + " classes, so labels must be 0.." +
                                std::to_string(kNumClasses - 1),
                            kDamagedFix);
}

/// Finds and checks the files of one split: headers, sizes and labels, without decompressing the
/// images; throws OptionError("path").
SplitFiles open_split(const DataDir& where, const std::string& prefix, std::int64_t limit) {
  SplitFiles files;
  files.images = find_file(where.dir, prefix + "-images-idx3-ubyte");
  files.labels = find_file(where.dir, prefix + "-labels-idx1-ubyte");

  strata::IdxHeader images;
  strata::IdxHeader labels;
  try {
    images = strata::read_idx_header(files.images);
    labels = strata::read_idx_header(files.labels);
  } catch (const strata::Error& e) {
    throw strata::OptionError("path", std::string("Fashion-MNIST: ") + e.what(), kDamagedFix);
  }
  if (images.type_code != strata::idx_type::kUInt8 || images.dims.size() != 3 || images.dims[1] != kSide ||
      images.dims[2] != kSide)
    throw strata::OptionError("path",
                              "Fashion-MNIST file " + quoted(files.images) + " holds type code " +
                                  std::to_string(images.type_code) + " of shape " + shape_text(images.dims) +
                                  "; expected unsigned bytes (code 8) of shape [n, 28, 28]",
                              kInstallFix);
  if (labels.type_code != strata::idx_type::kUInt8 || labels.dims.size() != 1)
    throw strata::OptionError("path",
                              "Fashion-MNIST file " + quoted(files.labels) + " holds type code " +
                                  std::to_string(labels.type_code) + " of shape " + shape_text(labels.dims) +
                                  "; expected unsigned bytes (code 8) of shape [n]",
                              kInstallFix);
  check_size(files.images, images, "images");
  check_size(files.labels, labels, "labels");
  if (labels.dims[0] != images.dims[0])
    throw strata::OptionError("path",
                              "Fashion-MNIST files " + quoted(files.images) + " and " + quoted(files.labels) +
                                  " disagree: " + std::to_string(images.dims[0]) + " images but " +
                                  std::to_string(labels.dims[0]) + " labels",
                              kInstallFix);
  if (images.dims[0] == 0)
    throw strata::OptionError("path", "Fashion-MNIST file " + quoted(files.images) + " holds no images",
                              kInstallFix);
  check_labels(files.labels);
  files.available = images.dims[0];
  files.used = limit > 0 ? std::min(limit, files.available) : files.available;
  return files;
}

std::shared_ptr<strata::Dataset> make_fashion_mnist(const FashionMnistOptions& options,
                                                    const strata::DatasetContext& context) {
  const DataDir where = resolve_dir(options, context);
  const std::string from = " (from " + where.origin + ")";
  std::error_code ec;
  if (!fs::is_directory(where.dir, ec))
    throw strata::OptionError("path",
                              "Fashion-MNIST directory " + quoted(where.dir) + from +
                                  (fs::exists(where.dir, ec) ? " is not a directory" : " does not exist"),
                              kInstallFix);
  std::vector<std::string> missing;
  for (const char* base : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                           "t10k-labels-idx1-ubyte"})
    if (find_file(where.dir, base).empty()) missing.push_back(std::string(base) + "[.gz]");
  if (!missing.empty()) {
    std::string list;
    for (std::size_t i = 0; i < missing.size(); ++i) list += (i ? ", " : "") + missing[i];
    throw strata::OptionError("path",
                              "Fashion-MNIST directory " + quoted(where.dir) + from + " lacks " + list,
                              kInstallFix);
  }
  SplitFiles train = open_split(where, "train", options.train_limit);
  SplitFiles eval = open_split(where, "t10k", options.eval_limit);
  return std::make_shared<FashionMnist>(std::move(train), std::move(eval), options.normalize);
}

void register_fashion_mnist(strata::Registry& registry) {
  strata::Schema<FashionMnistOptions> schema;
  schema
      .option("path", &FashionMnistOptions::path,
              "directory of the four IDX files (.gz or raw); "
              "\"\" = $STRATA_FASHION_MNIST_DIR, else /usr/share/datasets/fashion-mnist",
              strata::file_path())
      .option("normalize", &FashionMnistOptions::normalize,
              "scale pixels to [0, 1], then subtract 0.2860 and divide by 0.3530 (false: [0, 1] only)")
      .option("train_limit", &FashionMnistOptions::train_limit,
              "use only the first N of the 60000 training images (0 = all)", strata::at_least(0))
      .option("eval_limit", &FashionMnistOptions::eval_limit,
              "use only the first N of the 10000 test images (0 = all)", strata::at_least(0));
  registry.add_dataset<FashionMnistOptions>(
      "fashion_mnist", "Fashion-MNIST: 28x28 grayscale clothing images, 10 classes (60k train, 10k test)",
      schema, make_fashion_mnist);
}

}  // namespace

STRATA_PLUGIN(dataset, "fashion_mnist", "0.1.0", register_fashion_mnist)
