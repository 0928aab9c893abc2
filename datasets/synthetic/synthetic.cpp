// Dataset plugin `synthetic`: a Gaussian-mixture classification problem generated from a seed.
// Each class has one random center (standard normal per element); an example of class c is
// center[c] + noise * N(0, 1). Labels are uniform. Both splits come from one CPU generator in a
// fixed order (centers, train labels, train noise, eval labels, eval noise), so the data is
// identical bit for bit for the same options and seed. Needs no files: handy for tests and
// benchmarks. Generated on first use.

#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/types.h>

#include "strata/dataset.hpp"
#include "strata/errors.hpp"
#include "strata/options.hpp"
#include "strata/plugin.hpp"
#include "strata/registry.hpp"
#include "synthetic_text.hpp"

namespace {

/// Largest number of input elements (both splits together) the dataset agrees to hold: 4 GiB of
/// float32. Larger requests are almost always a typo in the sizes.
constexpr std::int64_t kMaxElements = std::int64_t{1} << 30;

/// Options of the `synthetic` dataset.
struct SyntheticOptions {
  std::int64_t train_size = 4096;                     ///< training examples
  std::int64_t eval_size = 1024;                      ///< evaluation examples
  std::vector<std::int64_t> input_shape{1, 28, 28};   ///< shape of one input
  std::int64_t num_classes = 10;                      ///< classes (one center each)
  double noise = 1.0;                                 ///< std of the noise around each center
  std::int64_t seed = -1;                             ///< -1: the run's [train] seed
};

/// One split in memory.
struct SplitData {
  torch::Tensor inputs;   ///< float32 [n, ...input_shape]
  torch::Tensor targets;  ///< int64 [n]
};

/// The generated dataset.
class Synthetic final : public strata::Dataset {
 public:
  Synthetic(const SyntheticOptions& options, std::uint64_t seed) : options_(options), seed_(seed) {}

  std::int64_t size(strata::Split split) const override {
    return split == strata::Split::kTrain ? options_.train_size : options_.eval_size;
  }

  strata::Batch get(strata::Split split, const torch::Tensor& indices) const override {
    std::call_once(generated_, [this] { generate(); });
    const SplitData& data = split == strata::Split::kTrain ? train_ : eval_;
    const torch::Tensor index = indices.to(torch::kLong).reshape({-1});
    return {data.inputs.index_select(0, index), data.targets.index_select(0, index), {}};
  }

  strata::DataSpec spec() const override {
    strata::DataSpec s;
    s.input_shape = options_.input_shape;
    s.num_classes = options_.num_classes;
    return s;
  }

 private:
  /// [n, ...input_shape]
  std::vector<std::int64_t> batch_shape(std::int64_t n) const {
    std::vector<std::int64_t> shape{n};
    shape.insert(shape.end(), options_.input_shape.begin(), options_.input_shape.end());
    return shape;
  }

  SplitData generate_split(std::int64_t n, const torch::Tensor& centers, at::Generator& generator) const {
    const auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
    torch::Tensor targets =
        torch::randint(options_.num_classes, {n}, generator, torch::TensorOptions().dtype(torch::kLong));
    torch::Tensor noise = torch::randn(batch_shape(n), generator, f32);
    torch::Tensor inputs = centers.index_select(0, targets).add_(noise.mul_(options_.noise));
    return {inputs, targets};
  }

  void generate() const {
    at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed_);
    const torch::Tensor centers =
        torch::randn(batch_shape(options_.num_classes), generator, torch::TensorOptions().dtype(torch::kFloat32));
    train_ = generate_split(options_.train_size, centers, generator);
    eval_ = generate_split(options_.eval_size, centers, generator);
  }

  SyntheticOptions options_;
  std::uint64_t seed_;
  mutable std::once_flag generated_;
  mutable SplitData train_;
  mutable SplitData eval_;
};

/// Checks what the schema cannot express; throws OptionError naming the option.
void validate(const SyntheticOptions& options) {
  if (options.input_shape.empty())
    throw strata::OptionError("input_shape", "input_shape is empty; it needs at least one dimension",
                              "Give the shape of one input, e.g. input_shape = [1, 28, 28] or [784].");
  std::int64_t per_example = 1;
  for (std::size_t i = 0; i < options.input_shape.size(); ++i) {
    const std::int64_t dim = options.input_shape[i];
    if (dim < 1)
      throw strata::OptionError("input_shape",
                                "input_shape[" + std::to_string(i) + "] is " + std::to_string(dim) +
                                    "; every dimension must be >= 1",
                                "Give positive sizes, e.g. input_shape = [1, 28, 28].");
    if (per_example > kMaxElements / dim)
      throw strata::OptionError("input_shape", "input_shape describes more than 2^30 elements per example",
                                "Use a smaller input_shape.");
    per_example *= dim;
  }
  const auto check_size = [&](const char* name, std::int64_t n) {
    if (n < 1)
      throw strata::OptionError(name, std::string(name) + " is " + std::to_string(n) + "; it must be >= 1");
    if (n > kMaxElements / per_example)
      throw strata::OptionError(name,
                                std::string(name) + " = " + std::to_string(n) + " examples of " +
                                    std::to_string(per_example) + " elements exceed the limit of 2^30 " +
                                    "elements (4 GiB of float32)",
                                "Use fewer examples or a smaller input_shape.");
  };
  check_size("train_size", options.train_size);
  check_size("eval_size", options.eval_size);
  if ((options.train_size + options.eval_size) > kMaxElements / per_example)
    throw strata::OptionError("train_size",
                              "train_size + eval_size = " + std::to_string(options.train_size + options.eval_size) +
                                  " examples of " + std::to_string(per_example) +
                                  " elements exceed the limit of 2^30 elements (4 GiB of float32)",
                              "Use fewer examples or a smaller input_shape.");
  if (options.num_classes < 2)
    throw strata::OptionError("num_classes", "num_classes is " + std::to_string(options.num_classes) +
                                                 "; a classification problem needs at least 2");
  if (options.num_classes > kMaxElements / per_example)
    throw strata::OptionError("num_classes", "num_classes is too large for the input_shape (the class "
                                             "centers alone would exceed 2^30 elements)");
  if (!(options.noise >= 0.0) || options.noise == std::numeric_limits<double>::infinity())
    throw strata::OptionError("noise", "noise must be a finite number >= 0, got " + std::to_string(options.noise));
  if (options.seed < -1)
    throw strata::OptionError("seed", "seed is " + std::to_string(options.seed) +
                                          "; it must be >= 0, or -1 for the run's [train] seed");
}

std::shared_ptr<strata::Dataset> make_synthetic(const SyntheticOptions& options, const strata::DatasetContext& context) {
  validate(options);
  const std::uint64_t seed = options.seed == -1 ? context.seed : static_cast<std::uint64_t>(options.seed);
  return std::make_shared<Synthetic>(options, seed);
}

void register_synthetic(strata::Registry& registry) {
  strata::Schema<SyntheticOptions> schema;
  schema
      .option("train_size", &SyntheticOptions::train_size, "number of training examples", strata::at_least(1))
      .option("eval_size", &SyntheticOptions::eval_size, "number of evaluation examples", strata::at_least(1))
      .option("input_shape", &SyntheticOptions::input_shape, "shape of one input, e.g. [1, 28, 28] or [784]",
              strata::at_least(1))
      .option("num_classes", &SyntheticOptions::num_classes, "number of classes (one random center each)",
              strata::at_least(2))
      .option("noise", &SyntheticOptions::noise, "standard deviation of the Gaussian noise around each center",
              strata::at_least(0))
      .option("seed", &SyntheticOptions::seed, "seed of the generated data; -1 = the run's [train] seed",
              strata::at_least(-1));
  registry.add_dataset<SyntheticOptions>(
      "synthetic", "Gaussian-mixture classification data generated from a seed (no files needed)", schema,
      make_synthetic);
  register_synthetic_text(registry);
}

}  // namespace

STRATA_PLUGIN(dataset, "synthetic,synthetic_text", "0.2.0", register_synthetic)
