// Dataset plugin `cifar10`: CIFAR-10 (Krizhevsky 2009), 32x32 colour images in 10 classes, from
// the *binary version* of the data set (cifar-10-binary.tar.gz, extracted to
// cifar-10-batches-bin/): data_batch_1.bin .. data_batch_5.bin (training, 10000 images each) and
// test_batch.bin (evaluation). A record is 1 label byte (0..9) followed by 3072 pixel bytes: the
// 1024 red, then the 1024 green, then the 1024 blue values of the image, each row-major.
//
// Everything is read and checked when the dataset is created (so `strata validate` finds a bad
// file): each file's size (whole records, at most 10000, as many in every file of the set) and
// every label, also those of records a limit leaves out. The used records are kept as uint8
// (150 MB for all 50000 training images); batches are converted to
// float32 when read. Optional augmentation (random crop after zero padding of 4, horizontal flip:
// the usual CIFAR recipe of He et al. 2016) applies to training batches only, and depends on
// (seed, example, epoch) alone through a stateless hash, so every rank and micro-batch split
// sees the same augmented example.

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <torch/types.h>

#include "strata/dataset.hpp"
#include "strata/errors.hpp"
#include "strata/options.hpp"
#include "strata/plugin.hpp"
#include "strata/registry.hpp"
#include "text_files.hpp"

namespace {

namespace fs = std::filesystem;
using strata::tokenizer::quoted;

constexpr const char* kEnvVar = "STRATA_CIFAR10_DIR";
constexpr const char* kDefaultDir = "data/cifar-10-batches-bin";  // relative to the experiment file
constexpr const char* kTarballDir = "cifar-10-batches-bin";      // what the tarball extracts to
constexpr std::int64_t kSide = 32;
constexpr std::int64_t kChannels = 3;
constexpr std::int64_t kPixels = kChannels * kSide * kSide;  // bytes of one image
constexpr std::int64_t kRecord = 1 + kPixels;                 // bytes of one record: label + image
constexpr std::int64_t kFileRecords = 10000;                  // records of a full batch file
constexpr std::int64_t kTrainFiles = 5;
constexpr std::int64_t kNumClasses = 10;
constexpr std::int64_t kPad = 4;  // augmentation: zero padding before the random 32x32 crop
// Per-channel mean and std of the training pixels scaled to [0, 1].
constexpr std::array<float, 3> kMean{0.4914F, 0.4822F, 0.4465F};
constexpr std::array<float, 3> kStd{0.2470F, 0.2435F, 0.2616F};

constexpr const char* kInstallFix =
    "Point `[dataset] path` (or the STRATA_CIFAR10_DIR environment variable) at the directory "
    "cifar-10-batches-bin extracted from the binary version of CIFAR-10 (cifar-10-binary.tar.gz from "
    "https://www.cs.toronto.edu/~kriz/cifar.html; not the Python or MATLAB version), which holds "
    "data_batch_1.bin .. data_batch_5.bin and test_batch.bin.";

constexpr const char* kDamagedFix =
    "The file is damaged: extract cifar-10-binary.tar.gz (https://www.cs.toronto.edu/~kriz/cifar.html) again, "
    "or point `[dataset] path` at a directory holding a complete copy of cifar-10-batches-bin.";

/// Options of the `cifar10` dataset.
struct Cifar10Options {
  std::string path;                ///< data directory; "" = $STRATA_CIFAR10_DIR, else data/cifar-10-batches-bin
  std::int64_t train_batches = 5;  ///< training files read: data_batch_1.bin .. data_batch_<N>.bin
  bool normalize = true;           ///< standardize each channel with the training mean and std
  bool augment = false;            ///< random crop (padding 4) and horizontal flip of training images
  std::int64_t train_limit = 0;    ///< use only the first N training examples; 0 = all
  std::int64_t eval_limit = 0;     ///< use only the first N test examples; 0 = all
};

/// Images and labels of one split, in memory.
struct SplitData {
  torch::Tensor images;  ///< uint8 [n, 3, 32, 32]
  torch::Tensor labels;  ///< int64 [n]
};

/// SplitMix64's output function (Steele et al. 2014): a stateless 64-bit mix.
constexpr std::uint64_t splitmix64(std::uint64_t x) noexcept {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

/// The augmentation of one training example: crop offsets in [0, 2 * kPad] of the padded image
/// and whether to mirror it.
struct Augmentation {
  std::int64_t dy = kPad;
  std::int64_t dx = kPad;
  bool flip = false;
};

Augmentation augmentation_of(std::uint64_t seed, std::int64_t example, std::int64_t epoch) noexcept {
  const std::uint64_t h = splitmix64(splitmix64(splitmix64(seed) ^ static_cast<std::uint64_t>(example)) ^
                                     static_cast<std::uint64_t>(epoch));
  constexpr std::uint64_t kOffsets = 2 * kPad + 1;
  return {static_cast<std::int64_t>((h & 0xFFFF) % kOffsets),
          static_cast<std::int64_t>(((h >> 16) & 0xFFFF) % kOffsets), ((h >> 63) & 1) != 0};
}

/// Writes image `src` ([3, 32, 32] uint8) shifted into the crop window and mirrored if asked;
/// pixels from the padding are 0 (black, as torchvision's RandomCrop(32, padding=4) on images).
void augment_image(const std::uint8_t* src, std::uint8_t* dst, const Augmentation& a) {
  for (std::int64_t c = 0; c < kChannels; ++c) {
    const std::uint8_t* plane = src + c * kSide * kSide;
    for (std::int64_t y = 0; y < kSide; ++y) {
      std::uint8_t* row = dst + (c * kSide + y) * kSide;
      const std::int64_t sy = y + a.dy - kPad;
      for (std::int64_t x = 0; x < kSide; ++x) {
        const std::int64_t sx = (a.flip ? kSide - 1 - x : x) + a.dx - kPad;
        row[x] = (sy >= 0 && sy < kSide && sx >= 0 && sx < kSide) ? plane[sy * kSide + sx] : 0;
      }
    }
  }
}

/// CIFAR-10 in memory.
class Cifar10 final : public strata::Dataset, public strata::Augmenting {
 public:
  Cifar10(SplitData train, SplitData eval, bool normalize, bool augment, std::uint64_t seed)
      : train_(std::move(train)), eval_(std::move(eval)), normalize_(normalize), augment_(augment), seed_(seed) {
    mean_ = torch::tensor(std::vector<float>(kMean.begin(), kMean.end())).view({1, kChannels, 1, 1});
    inv_std_ = torch::tensor(std::vector<float>(kStd.begin(), kStd.end())).reciprocal().view({1, kChannels, 1, 1});
  }

  std::int64_t size(strata::Split split) const override { return data(split).labels.size(0); }

  strata::Batch get(strata::Split split, const torch::Tensor& indices) const override {
    const SplitData& d = data(split);
    const torch::Tensor index = indices.to(torch::kLong).reshape({-1});
    return {to_float(d.images.index_select(0, index)), d.labels.index_select(0, index), {}};
  }

  strata::Batch get_train(const torch::Tensor& indices, std::int64_t epoch) const override {
    if (!augment_) return get(strata::Split::kTrain, indices);
    const torch::Tensor index = indices.to(torch::kLong).reshape({-1}).contiguous();
    const std::int64_t n = index.size(0);
    const std::int64_t available = train_.labels.size(0);
    torch::Tensor images = torch::empty({n, kChannels, kSide, kSide}, torch::kUInt8);
    const auto* idx = index.data_ptr<std::int64_t>();
    const auto* src = train_.images.data_ptr<std::uint8_t>();
    auto* dst = images.data_ptr<std::uint8_t>();
    for (std::int64_t i = 0; i < n; ++i) {
      if (idx[i] < 0 || idx[i] >= available)
        throw strata::Error("cifar10: training index " + std::to_string(idx[i]) + " is outside [0, " +
                            std::to_string(available) + ")");
      augment_image(src + idx[i] * kPixels, dst + i * kPixels, augmentation_of(seed_, idx[i], epoch));
    }
    return {to_float(images), train_.labels.index_select(0, index), {}};
  }

  strata::DataSpec spec() const override {
    strata::DataSpec s;
    s.input_shape = {kChannels, kSide, kSide};
    s.num_classes = kNumClasses;
    return s;
  }

 private:
  const SplitData& data(strata::Split split) const { return split == strata::Split::kTrain ? train_ : eval_; }

  /// uint8 [n, 3, 32, 32] -> float32 in [0, 1], standardized per channel when asked.
  torch::Tensor to_float(const torch::Tensor& images) const {
    torch::Tensor x = images.to(torch::kFloat32).div_(255.0);
    if (normalize_) x.sub_(mean_).mul_(inv_std_);
    return x;
  }

  SplitData train_;
  SplitData eval_;
  bool normalize_;
  bool augment_;
  std::uint64_t seed_;
  torch::Tensor mean_;     // float32 [1, 3, 1, 1]
  torch::Tensor inv_std_;  // float32 [1, 3, 1, 1]
};

/// One batch file: its size, its records and how many of them are read.
struct BatchFile {
  fs::path file;
  std::int64_t bytes = 0;    ///< size of the file
  std::int64_t records = 0;  ///< records in the file
  std::int64_t used = 0;     ///< records read (after the split's limit)
};

/// Checks the sizes of all files of a set (training and test) and sets their `records`: every
/// file holds the same whole number of records, 10000 in CIFAR-10 (fewer in sets made for tests),
/// so the count expected is the largest whole count found, up to 10000. Bytes short of it are a
/// truncated file, bytes beyond it trailing bytes. Throws OptionError("path").
void check_sizes(std::vector<BatchFile>& files) {
  const auto whole = [](const BatchFile& f) { return std::min(f.bytes / kRecord, kFileRecords); };
  const BatchFile* reference = &files.front();
  for (const auto& f : files)
    if (whole(f) > whole(*reference)) reference = &f;
  const std::int64_t expected = whole(*reference);
  const std::string full = "a CIFAR-10 batch file is " + std::to_string(kFileRecords) + " records of " +
                           std::to_string(kRecord) + " bytes (" + std::to_string(kFileRecords * kRecord) + ")";
  for (auto& f : files) {
    f.records = expected;
    if (expected > 0 && f.bytes == expected * kRecord) continue;
    std::string what = quoted(f.file) + " is " + std::to_string(f.bytes) + " bytes";
    if (f.bytes % kRecord != 0)
      what += ", not a whole number of " + std::to_string(kRecord) + "-byte records (1 label byte + 3072 pixel bytes)";
    if (expected == 0)
      throw strata::OptionError("path", what + ", less than one record; " + full + ": the file is truncated",
                                kDamagedFix);
    what += "; " + std::to_string(expected) + " records (" + std::to_string(expected * kRecord) + " bytes) expected, " +
            (expected == kFileRecords ? full
                                      : "as in " + quoted(reference->file.filename()) + " (every file of a set "
                                        "holds the same number; " + full + ")");
    what += f.bytes < expected * kRecord
                ? ": the file is truncated"
                : ": the file has " + std::to_string(f.bytes - expected * kRecord) +
                      " trailing bytes (or is not a CIFAR-10 binary batch: CIFAR-100's have 2 label bytes per record)";
    throw strata::OptionError("path", what, kDamagedFix);
  }
}

/// Reads `files` whole in chunks: the first `used` records of each into one split, and every
/// label checked, also those of records the limit leaves out.
SplitData read_split(const std::vector<BatchFile>& files) {
  constexpr std::int64_t kChunk = 256;  // records per read: 787 kB
  std::int64_t total = 0;
  for (const auto& f : files) total += f.used;
  SplitData out{torch::empty({total, kChannels, kSide, kSide}, torch::kUInt8), torch::empty({total}, torch::kLong)};
  auto* images = out.images.data_ptr<std::uint8_t>();
  auto* labels = out.labels.data_ptr<std::int64_t>();
  std::vector<char> buffer(static_cast<std::size_t>(kChunk * kRecord));
  std::int64_t row = 0;
  for (const auto& f : files) {
    std::ifstream in(f.file, std::ios::binary);
    for (std::int64_t first = 0; first < f.records; first += kChunk) {
      const std::int64_t n = std::min(kChunk, f.records - first);
      if (!in || !in.read(buffer.data(), static_cast<std::streamsize>(n * kRecord)))
        throw strata::OptionError("path",
                                  "cannot read " + std::to_string(n * kRecord) + " bytes at offset " +
                                      std::to_string(first * kRecord) + " of " + quoted(f.file),
                                  kDamagedFix);
      for (std::int64_t k = 0; k < n; ++k) {
        const std::int64_t r = first + k;
        const char* record = buffer.data() + k * kRecord;
        const auto label = static_cast<unsigned char>(record[0]);
        if (label >= kNumClasses)
          throw strata::OptionError("path",
                                    quoted(f.file) + ": label " + std::to_string(label) + " at record " +
                                        std::to_string(r) + " (byte offset " + std::to_string(r * kRecord) +
                                        ") is outside 0..9; the file is damaged or not a CIFAR-10 binary batch "
                                        "(CIFAR-100's binary files have 2 label bytes per record)",
                                    kDamagedFix);
        if (r >= f.used) continue;
        labels[row] = label;
        std::copy(record + 1, record + kRecord, reinterpret_cast<char*>(images + row * kPixels));
        ++row;
      }
    }
  }
  return out;
}

/// The files `names` in `dir`, with their sizes.
std::vector<BatchFile> open_files(const fs::path& dir, const std::vector<std::string>& names) {
  std::vector<BatchFile> files;
  for (const auto& name : names) {
    BatchFile f{dir / name};
    std::error_code ec;
    f.bytes = static_cast<std::int64_t>(fs::file_size(f.file, ec));
    if (ec)
      throw strata::OptionError("path", "cannot read the size of " + quoted(f.file) + ": " + ec.message(),
                                kInstallFix);
    files.push_back(f);
  }
  return files;
}

/// Applies `limit` (0 = none) to the files of one split, in file order.
void apply_limit(std::vector<BatchFile>& files, std::int64_t limit) {
  std::int64_t remaining = limit > 0 ? limit : std::int64_t{1} << 62;
  for (auto& f : files) {
    f.used = std::min(f.records, remaining);
    remaining -= f.used;
  }
}

/// The data directory: the option, else the environment, else the default; a directory that
/// holds the tarball's cifar-10-batches-bin/ stands for that subdirectory.
fs::path resolve_dir(const Cifar10Options& options, const strata::DatasetContext& context,
                     const std::vector<std::string>& needed) {
  const strata::DataLocation where = strata::locate_data(options.path, kEnvVar, kDefaultDir, context);
  fs::path dir = where.path;
  const std::string from = where.from();

  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw strata::OptionError("path",
                              "CIFAR-10 directory " + quoted(dir) + from +
                                  (fs::exists(dir, ec) ? " is not a directory" : " does not exist"),
                              kInstallFix);
  if (!fs::exists(dir / needed.front(), ec) && fs::exists(dir / kTarballDir / needed.front(), ec))
    dir /= kTarballDir;
  std::string missing;
  for (const auto& name : needed)
    if (!fs::is_regular_file(dir / name, ec)) missing += (missing.empty() ? "" : ", ") + name;
  if (!missing.empty()) {
    std::string hint;
    if (fs::exists(dir / "data_batch_1", ec) || fs::exists(dir / "batches.meta", ec))
      hint = " (it looks like the Python version of CIFAR-10; the binary version is needed)";
    throw strata::OptionError("path", "CIFAR-10 directory " + quoted(dir) + from + " lacks " + missing + hint,
                              kInstallFix);
  }
  return dir;
}

std::shared_ptr<strata::Dataset> make_cifar10(const Cifar10Options& options, const strata::DatasetContext& context) {
  if (options.train_batches < 1 || options.train_batches > kTrainFiles)
    throw strata::OptionError("train_batches",
                              "train_batches is " + std::to_string(options.train_batches) +
                                  "; CIFAR-10 has 5 training files",
                              "Use a value from 1 to 5.");
  std::vector<std::string> train_names;
  for (std::int64_t i = 1; i <= options.train_batches; ++i)
    train_names.push_back("data_batch_" + std::to_string(i) + ".bin");
  std::vector<std::string> needed = train_names;
  needed.push_back("test_batch.bin");
  const fs::path dir = resolve_dir(options, context, needed);

  std::vector<BatchFile> files = open_files(dir, needed);  // training files, then test_batch.bin
  check_sizes(files);
  std::vector<BatchFile> eval_files(files.end() - 1, files.end());
  files.pop_back();
  apply_limit(files, options.train_limit);
  apply_limit(eval_files, options.eval_limit);
  SplitData train = read_split(files);
  SplitData eval = read_split(eval_files);
  return std::make_shared<Cifar10>(std::move(train), std::move(eval), options.normalize, options.augment, context.seed);
}

void register_cifar10(strata::Registry& registry) {
  strata::Schema<Cifar10Options> schema;
  schema
      .option("path", &Cifar10Options::path,
              "directory of the binary batches (data_batch_1.bin .. 5, test_batch.bin); \"\" = $STRATA_CIFAR10_DIR, "
              "else data/cifar-10-batches-bin next to the experiment file",
              strata::file_path())
      .option("train_batches", &Cifar10Options::train_batches,
              "training files read: data_batch_1.bin .. data_batch_<N>.bin", strata::between(1, kTrainFiles))
      .option("normalize", &Cifar10Options::normalize,
              "scale pixels to [0, 1], then standardize per channel with mean (0.4914, 0.4822, 0.4465) and std "
              "(0.2470, 0.2435, 0.2616) (false: [0, 1] only)")
      .option("augment", &Cifar10Options::augment,
              "training images only: random 32x32 crop of the image zero-padded by 4, and a horizontal flip with "
              "probability 1/2, drawn from ([train] seed, example, epoch)")
      .option("train_limit", &Cifar10Options::train_limit,
              "use only the first N training images (0 = all of the train_batches files)", strata::at_least(0))
      .option("eval_limit", &Cifar10Options::eval_limit, "use only the first N of the 10000 test images (0 = all)",
              strata::at_least(0));
  registry.add_dataset<Cifar10Options>(
      "cifar10", "CIFAR-10: 32x32 colour images, 10 classes (50k train, 10k test), from the binary version", schema,
      make_cifar10);
}

}  // namespace

STRATA_PLUGIN(dataset, "cifar10", "0.1.0", register_cifar10)
