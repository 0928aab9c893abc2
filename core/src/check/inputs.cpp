// What `strata check` derives from its command line and a strategy's schema without running
// anything (check/check.hpp): the world sizes, the strategy names, the option values a schema
// rejects, the one global batch every world size divides, the workloads' experiment files, the
// option sets a strategy is checked with and the reference strategy.

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

#include "check/check.hpp"
#include "strata/registry.hpp"
#include "strata/errors.hpp"
#include "text/suggest.hpp"

namespace strata {

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> items;
  for (std::size_t start = 0;;) {
    const auto end = text.find(',', start);
    items.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return items;
    start = end + 1;
  }
}

std::vector<int> parse_world_sizes(const std::string& text) {
  const UsageError bad(fmt::format("--world-sizes takes a comma-separated list of positive integers, got '{}'.", text),
                       "Write for example `--world-sizes 1,2,3`.");
  std::vector<int> sizes;
  for (const auto& item : split_commas(text)) {
    if (item.empty() || item.size() > 6 || item.find_first_not_of("0123456789") != std::string::npos) throw bad;
    const int w = std::stoi(item);
    if (w < 1) throw bad;
    sizes.push_back(w);
  }
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  return sizes;
}

std::vector<std::string> parse_strategy_names(const std::string& text, const std::string& where) {
  auto names = split_commas(text);
  for (const auto& name : names)
    if (name.empty())
      throw UsageError(fmt::format("`{} {}` has an empty strategy name.", where, text),
                       fmt::format("Write one name, or several separated by commas: `{} NAME,NAME`.", where));
  return names;
}

namespace detail {

std::vector<Violation> violating_values(const OptionSpec& spec) {
  const auto t = spec.type;
  const bool integer = t == OptionType::kInt || t == OptionType::kIntList;
  const bool number = integer || t == OptionType::kFloat || t == OptionType::kFloatList;
  const bool list = t == OptionType::kIntList || t == OptionType::kFloatList || t == OptionType::kStringList;
  const auto text = [&](double v) {
    const std::string s = integer ? to_toml(static_cast<std::int64_t>(v)) : to_toml(v);
    return list ? fmt::format("[{}]", s) : s;
  };
  const Constraint& c = spec.constraint;
  std::vector<Violation> out;
  if (number && c.min) {
    const double m = *c.min;
    const double v = integer ? (c.min_exclusive ? std::floor(m) : std::ceil(m) - 1) : (c.min_exclusive ? m : m - 1);
    out.push_back({text(v), fmt::format("{} {}", c.min_exclusive ? ">" : ">=", m)});
  }
  if (number && c.max) {
    const double m = *c.max;
    const double v = integer ? (c.max_exclusive ? std::ceil(m) : std::floor(m) + 1) : (c.max_exclusive ? m : m + 1);
    out.push_back({text(v), fmt::format("{} {}", c.max_exclusive ? "<" : "<=", m)});
  }
  if ((t == OptionType::kString || t == OptionType::kStringList) && !c.choices.empty()) {
    const std::string s = "\"definitely_not_a_choice\"";
    out.push_back({list ? fmt::format("[{}]", s) : s, fmt::format("one of: {}", join(c.choices))});
  }
  return out;
}

std::string experiment_value(const std::string& file, const std::string& key) {
  const toml::table table = toml::parse_file(file);
  const toml::node_view<const toml::node> node = table.at_path(key);
  if (!node) return {};
  std::ostringstream text;
  if (const auto* s = node.as_string()) text << '"' << s->get() << '"';
  else text << node;
  return text.str();
}

std::int64_t common_global_batch(const std::vector<int>& world_sizes, int micro_batches, std::int64_t at_least) {
  std::int64_t l = micro_batches;
  for (int w : world_sizes) {
    l = std::lcm(l, static_cast<std::int64_t>(w));
    if (l > (std::int64_t{1} << 40)) return l;  // far beyond any usable batch; the caller refuses it
  }
  return (at_least + l - 1) / l * l;
}

namespace {
constexpr std::int64_t kTrainSize = 512;  // training examples of a workload (more when the batch is larger)
#define STRATA_CHECK_IMAGES(shape) \
  "name = \"synthetic\"\ntrain_size = {train}\neval_size = 256\ninput_shape = " shape "\nnum_classes = 4\nnoise = 1.0"
/// `--models standard`: the MLP and the CNN.
constexpr Workload kStandard[] = {
    {"mlp_adamw", "mlp/adamw", "name = \"mlp\"\nhidden = [32]", STRATA_CHECK_IMAGES("[16]"),
     "name = \"adamw\"\nlr = 1e-2\nweight_decay = 0.01", 1},
    {"cnn_sgd", "cnn/sgd", "name = \"cnn\"\nchannels = [4, 8]\nhidden = 16\ngroups = 2",
     STRATA_CHECK_IMAGES("[1, 12, 12]"), "name = \"sgd\"\nlr = 0.05\nmomentum = 0.9\nweight_decay = 0.01", 1},
    {"mlp_sgd_accum", "mlp/sgd, 2 micro-batches", "name = \"mlp\"\nhidden = [32]", STRATA_CHECK_IMAGES("[16]"),
     "name = \"sgd\"\nlr = 0.1\nmomentum = 0.9\nweight_decay = 0.01", 2},
};
/// `--models transformers`: a Llama decoder on padded sequences of uneven length (ranks and micro-
/// batches with different numbers of target tokens), and a ViT. Adam divides each gradient by its
/// own magnitude, so on elements whose gradient is nearly zero (sums that cancel: SwiGLU rows, the
/// ViT's key bias, zero in exact arithmetic) it turns reduction-order noise into steps of size lr:
/// 3e-4 of the largest weight after one step at eps 1e-8. The Llama runs AdamW with eps 1e-3
/// (2e-6 over the 24 steps), the ViT SGD.
constexpr Workload kTransformers[] = {
    {"llama_adamw", "llama/adamw, padded tokens", "name = \"llama\"\npreset = \"debug\"",
     "name = \"synthetic_text\"\ntrain_size = {train}\neval_size = 64\nvocab_size = 64\nseq_len = 16\nmin_len = 4",
     "name = \"adamw\"\nlr = 1e-2\neps = 1e-3\nweight_decay = 0.01", 1},
    {"vit_sgd_accum", "vit/sgd, 2 micro-batches", "name = \"vit\"\npatch_size = 4\ndim = 32\ndepth = 2\nheads = 2",
     STRATA_CHECK_IMAGES("[3, 8, 8]"), "name = \"sgd\"\nlr = 0.05\nmomentum = 0.9\nweight_decay = 0.01", 2},
};
#undef STRATA_CHECK_IMAGES
}  // namespace

std::vector<Workload> workloads_of(const std::string& models) {
  if (models == "standard") return {std::begin(kStandard), std::end(kStandard)};
  if (models == "transformers") return {std::begin(kTransformers), std::end(kTransformers)};
  throw UsageError("`--models " + models + "` is not a workload set of `strata check`.",
                   "Write `--models standard` (MLP and CNN, the default) or `--models transformers` (ViT and Llama).");
}

std::string workload_toml(const Workload& w, std::int64_t global_batch, const std::string& reference, std::int64_t steps) {
  return fmt::format(
      "# Written by `strata check`: {title}. The check runs it with `{reference}` and, through --set, with the\n"
      "# strategy under test (strategy.name, and distributed.nproc or the strategy's device option).\n\n"
      "[experiment]\nname = \"check_{name}\"\n\n[model]\n{model}\n\n"
      "[dataset]\n{dataset}\n\n[strategy]\nname = \"{reference}\"\n\n[optimizer]\n{optimizer}\n\n"
      "[train]\nsteps = {steps}\nglobal_batch_size = {batch}\nmicro_batches = {micro}\nseed = 0\n"
      "lr_schedule = \"constant\"\ndevice = \"cpu\"\nthreads = 1\n\n[eval]\nevery = 0\nbatches = 0\n\n"
      "[log]\nevery = 1000\n",
      fmt::arg("title", w.title), fmt::arg("name", w.name), fmt::arg("model", w.model),
      fmt::arg("dataset", fmt::format(fmt::runtime(w.dataset), fmt::arg("train", std::max(kTrainSize, global_batch)))),
      fmt::arg("optimizer", w.optimizer), fmt::arg("steps", steps), fmt::arg("reference", reference), fmt::arg("batch", global_batch),
      fmt::arg("micro", w.micro_batches));
}

std::string reference_strategy(const Registry& registry) {
  for (const auto* e : registry.entries())
    if (e->kind == PluginKind::kStrategy && e->traits.placement.kind == Placement::Kind::kOneDevice) return e->name;
  throw PluginError({}, "no strategy that runs on one device is registered: `strata check` has no reference.",
                    "Keep the built-in strategy plugins on the plugin search path.");
}

std::vector<Variant> variants_of(const std::vector<std::string>& sets, bool matrix, const RegistryEntry& entry) {
  Variant defaults;
  for (auto set : sets) {
    if (set.rfind("strategy.", 0) == 0) set = set.substr(std::string("strategy.").size());
    const std::string key = set.substr(0, set.find('='));
    if (set.find('=') == std::string::npos || entry.schema.find(key) == nullptr)
      throw UsageError(fmt::format("--set {}: '{}' is not an option of strategy '{}'.", set, key, entry.name),
                       fmt::format("Give strategy.KEY=VALUE with a KEY of `strata describe {}`.", entry.name));
    defaults.sets.push_back(set);
  }
  if (!defaults.sets.empty()) defaults.label = fmt::format("{}", fmt::join(defaults.sets, ", "));
  std::vector<Variant> out{defaults};
  if (matrix && sets.empty())
    for (const auto& row : entry.traits.option_matrix) {
      Variant v;
      v.label = row.label;
      for (const auto& [key, value] : row.options) v.sets.push_back(key + "=" + value);
      v.all_workloads = false;
      out.push_back(std::move(v));
    }
  return out;
}


}  // namespace detail

}  // namespace strata
