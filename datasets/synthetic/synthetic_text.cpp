// Dataset `synthetic_text`: padded token sequences of uneven length generated from a seed, for
// language models. It exercises what real text batches bring: int64 inputs, an attention mask,
// next-token targets with padding ignored, and micro-batches that carry different numbers of
// target tokens (the case the trainer's global loss normalization exists for).
//
// Token 0 is padding; real tokens lie in [1, vocab_size). Each sequence follows a fixed random
// successor table (token t is followed by next[t] with probability 1 - noise, else by a uniform
// token), so a model can learn it. An example of length L (uniform in [min_len, seq_len]) has
// L input tokens and L targets (the next tokens; the last one is the token after the window), and
// seq_len - L padding positions: mask 0, target kIgnoreIndex, on the right or (`padding = "left"`)
// on the left.

#include "synthetic_text.hpp"

#include <cstdint>
#include <mutex>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/types.h>

#include "strata/dataset.hpp"
#include "strata/errors.hpp"
#include "strata/options.hpp"
#include "strata/registry.hpp"

namespace {

struct TextOptions {
  std::int64_t train_size = 2048;  ///< training sequences
  std::int64_t eval_size = 256;    ///< evaluation sequences
  std::int64_t vocab_size = 64;    ///< token ids in [0, vocab_size), 0 = padding
  std::int64_t seq_len = 32;       ///< positions per sequence (padded)
  std::int64_t min_len = 8;        ///< shortest sequence
  double noise = 0.1;              ///< chance that a token is uniform rather than its successor
  std::string padding = "right";   ///< right or left
  std::int64_t seed = -1;          ///< -1: the run's [train] seed
};

struct SplitData {
  torch::Tensor inputs, targets, mask;
};

class SyntheticText final : public strata::Dataset {
 public:
  SyntheticText(const TextOptions& options, std::uint64_t seed) : options_(options), seed_(seed) {}

  std::int64_t size(strata::Split split) const override {
    return split == strata::Split::kTrain ? options_.train_size : options_.eval_size;
  }

  strata::Batch get(strata::Split split, const torch::Tensor& indices) const override {
    std::call_once(generated_, [this] { generate(); });
    const SplitData& d = split == strata::Split::kTrain ? train_ : eval_;
    const torch::Tensor i = indices.to(torch::kLong).reshape({-1});
    return {d.inputs.index_select(0, i), d.targets.index_select(0, i), d.mask.index_select(0, i)};
  }

  strata::DataSpec spec() const override {
    strata::DataSpec s;
    s.input_shape = {options_.seq_len};
    s.input_dtype = torch::kInt64;
    s.vocab_size = options_.vocab_size;
    s.seq_len = options_.seq_len;
    s.pad_id = 0;
    s.ignored_targets = true;
    return s;
  }

 private:
  SplitData generate_split(std::int64_t n, const torch::Tensor& successor, at::Generator& gen) const {
    const std::int64_t T = options_.seq_len, V = options_.vocab_size;
    const auto i64 = torch::TensorOptions().dtype(torch::kLong);
    // T + 1 tokens per sequence: a chain through the successor table with uniform jumps.
    auto uniform = torch::randint(1, V, {n, T + 1}, gen, i64);
    auto jump = torch::rand({n, T + 1}, gen) < options_.noise;
    auto tokens = torch::empty({n, T + 1}, i64);
    tokens.select(1, 0).copy_(uniform.select(1, 0));
    for (std::int64_t t = 1; t <= T; ++t)
      tokens.select(1, t).copy_(
          torch::where(jump.select(1, t), uniform.select(1, t), successor.index_select(0, tokens.select(1, t - 1))));
    auto lengths = torch::randint(options_.min_len, T + 1, {n}, gen, i64);
    auto position = torch::arange(T, i64).unsqueeze(0);
    auto mask = position < lengths.unsqueeze(1);  // right padding
    auto inputs = tokens.slice(1, 0, T).masked_fill(mask.logical_not(), 0);
    auto targets = tokens.slice(1, 1, T + 1).masked_fill(mask.logical_not(), strata::kIgnoreIndex);
    if (options_.padding == "left") {
      // Roll each row right by its padding, so the real tokens end at the last position.
      auto shift = (T - lengths).unsqueeze(1);
      auto source = (position - shift).remainder(T);
      inputs = inputs.gather(1, source);
      targets = targets.gather(1, source);
      mask = mask.gather(1, source);
    }
    return {inputs.contiguous(), targets.contiguous(), mask.to(torch::kLong).contiguous()};
  }

  void generate() const {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed_);
    auto successor = torch::randint(1, options_.vocab_size, {options_.vocab_size}, gen,
                                    torch::TensorOptions().dtype(torch::kLong));
    train_ = generate_split(options_.train_size, successor, gen);
    eval_ = generate_split(options_.eval_size, successor, gen);
  }

  TextOptions options_;
  std::uint64_t seed_;
  mutable std::once_flag generated_;
  mutable SplitData train_, eval_;
};

std::shared_ptr<strata::Dataset> make_text(const TextOptions& o, const strata::DatasetContext& context) {
  if (o.min_len > o.seq_len)
    throw strata::OptionError("min_len", "min_len " + std::to_string(o.min_len) + " exceeds seq_len " +
                                             std::to_string(o.seq_len),
                              "Use min_len <= seq_len.");
  constexpr std::int64_t kMaxTokens = std::int64_t{1} << 28;
  if ((o.train_size + o.eval_size) > kMaxTokens / (o.seq_len + 1))
    throw strata::OptionError("train_size", "train_size + eval_size sequences of seq_len tokens exceed 2^28 tokens",
                              "Use fewer or shorter sequences.");
  return std::make_shared<SyntheticText>(o, o.seed == -1 ? context.seed : static_cast<std::uint64_t>(o.seed));
}

}  // namespace

void register_synthetic_text(strata::Registry& registry) {
  strata::Schema<TextOptions> schema;
  schema.option("train_size", &TextOptions::train_size, "number of training sequences", strata::at_least(1))
      .option("eval_size", &TextOptions::eval_size, "number of evaluation sequences", strata::at_least(1))
      .option("vocab_size", &TextOptions::vocab_size, "token ids in [0, vocab_size); 0 is padding",
              strata::at_least(3))
      .option("seq_len", &TextOptions::seq_len, "positions per sequence, padding included", strata::at_least(1))
      .option("min_len", &TextOptions::min_len, "tokens in the shortest sequence", strata::at_least(1))
      .option("noise", &TextOptions::noise, "chance that a token is uniform instead of its successor",
              strata::at_least(0))
      .option("padding", &TextOptions::padding, "side of the padding", strata::one_of({"right", "left"}))
      .option("seed", &TextOptions::seed, "seed of the generated data; -1 = the run's [train] seed",
              strata::at_least(-1));
  registry.add_dataset<TextOptions>("synthetic_text",
                                    "padded token sequences of uneven length from a seed, for language models "
                                    "(no files needed)",
                                    schema, make_text);
}
