// `strata check NAME`: runs the named strategy and `single` as real `strata run` children on small
// experiments that it writes into its own directory, and holds the strategy to the Strategy
// contract: the same final model as `single`, tensor by tensor (or within the tolerance it declares
// as approximate by design), model-state memory and bus bytes as DESIGN §5 and §8 say for the
// footprint it declares (consistency bounds when it declares none), a full state dict that
// `single` loads back, and clean errors for bad options.

#include "check/check.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "compare/sweep.hpp"
#include "config/experiment.hpp"
#include "estimate/profile.hpp"
#include "io/run_dir.hpp"
#include "io/run_result.hpp"
#include "launch/child.hpp"
#include "run.hpp"
#include "strata/errors.hpp"
#include "strata/registry.hpp"
#include "text/suggest.hpp"
#include "text/table.hpp"
#include "train/model_diff.hpp"

namespace strata {

namespace fs = std::filesystem;

namespace {

constexpr double kExactTensorRel = 1e-5;  // every tensor of the final model, relative to its largest value
constexpr double kExactLossAbs = 1e-4;  // final_loss, absolute
constexpr double kRoundTripRel = 1e-9;  // param_norm of the saved model reloaded by `single`
constexpr double kReloadLr = 1e-12;     // the reloading run's one step moves nothing measurable
constexpr double kMemoryRel = 0.05;     // model state against DESIGN §5, plus padding
constexpr double kTrafficRel = 0.02;    // bus bytes against DESIGN §8, plus padding and norms
constexpr std::int64_t kSteps = 24;
constexpr std::int64_t kMinGlobalBatch = 24;
constexpr std::int64_t kTrainSize = 512;
constexpr std::int64_t kMaxGlobalBatch = 4096;
constexpr const char* kUnknownOption = "definitely_not_an_option";
constexpr const char* kCrashMarkers[] = {"terminate called", "Segmentation", "Exception raised from", "core dumped",
                                         "Aborted"};

/// A small experiment that the strategy and `single` both train. The first one (AdamW) also
/// serves the memory, communication and state-dict checks. SGD makes the others sensitive to the
/// scale of the gradients, to which Adam(W) is blind: gradients summed over ranks or
/// micro-batches instead of averaged give AdamW the same steps (up to epsilon), but not SGD.
struct Workload {
  const char* name;   ///< file stem and run label
  const char* title;  ///< in the table
  const char* model;  ///< body of [model]
  const char* dataset;  ///< body of [dataset]; {train} is the number of training examples
  const char* optimizer;  ///< body of [optimizer]
  int micro_batches;
};
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
constexpr int kMicroBatches = 2;  // the largest micro_batches of any workload

std::vector<Workload> workloads_of(const std::string& models) {
  if (models == "standard") return {std::begin(kStandard), std::end(kStandard)};
  if (models == "transformers") return {std::begin(kTransformers), std::end(kTransformers)};
  throw UsageError("`--models " + models + "` is not a workload set of `strata check`.",
                   "Write `--models standard` (MLP and CNN, the default) or `--models transformers` (ViT and Llama).");
}

std::string workload_toml(const Workload& w, std::int64_t global_batch) {
  return fmt::format(
      "# Written by `strata check`: {title}. The check runs it with `single` and, through --set, with the\n"
      "# strategy under test (strategy.name, and distributed.nproc or the strategy's device option).\n\n"
      "[experiment]\nname = \"check_{name}\"\n\n[model]\n{model}\n\n"
      "[dataset]\n{dataset}\n\n[strategy]\nname = \"single\"\n\n[optimizer]\n{optimizer}\n\n"
      "[train]\nsteps = {steps}\nglobal_batch_size = {batch}\nmicro_batches = {micro}\nseed = 0\n"
      "lr_schedule = \"constant\"\ndevice = \"cpu\"\nthreads = 1\n\n[eval]\nevery = 0\nbatches = 0\n\n"
      "[log]\nevery = 1000\n",
      fmt::arg("title", w.title), fmt::arg("name", w.name), fmt::arg("model", w.model),
      fmt::arg("dataset", fmt::format(fmt::runtime(w.dataset), fmt::arg("train", std::max(kTrainSize, global_batch)))),
      fmt::arg("optimizer", w.optimizer), fmt::arg("steps", kSteps), fmt::arg("batch", global_batch),
      fmt::arg("micro", w.micro_batches));
}

enum class Verdict { kPass, kFail, kNotApplicable };

struct Row {
  std::string check;
  std::string world;  ///< "-" for checks done once
  Verdict verdict = Verdict::kFail;
  std::string detail;
};

/// One child `strata` command and what it left.
struct Outcome {
  std::string label;
  fs::path dir;
  int exit_code = -1;  ///< -1: not started (the check was interrupted)
  std::vector<std::string> lines;
  RunResult result;

  bool ok() const { return exit_code == 0 && result.status == "ok"; }
  double number(const std::string& path) const { return result.number(path); }
  /// Why it failed, for the table.
  std::string failure() const {
    if (exit_code < 0) return "not run (interrupted)";
    const std::string error = result.error.empty() ? error_from_output(lines) : result.error;
    return fmt::format("{} failed (exit {}): {} [{}]", label, exit_code, error, (dir / "output.log").string());
  }
};

double relative(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-30); }

std::string clip(std::string text, std::size_t limit = 240) {
  if (text.size() > limit) text = text.substr(0, limit - 3) + "...";
  return text;
}

class Checker {
 public:
  Checker(const RegistryEntry& entry, std::vector<int> worlds, fs::path dir, std::vector<Workload> workloads)
      : entry_(entry), worlds_(std::move(worlds)), dir_(std::move(dir)), workloads_(std::move(workloads)) {
    for (const auto& w : workloads_) files_.push_back(dir_ / (std::string(w.name) + ".toml"));
    last_unit_.assign(workloads_.size(), -1);
    for (const auto& spec : entry_.schema.specs)
      for (auto& v : detail::violating_values(spec)) violations_.push_back({spec.name, std::move(v)});
    total_ = static_cast<int>(workloads_.size()) + 1 + static_cast<int>(violations_.size());
    for (int w : worlds_)
      if (allowed(w)) total_ += static_cast<int>(workloads_.size()) + 1;
  }

  /// Runs every check; returns the signal that interrupted the check (0 if none).
  int run_all() {
    for (std::size_t i = 0; i < workloads_.size(); ++i)
      references_.push_back(run(fmt::format("single, {}", workloads_[i].title),
                                fmt::format("single_{}", workloads_[i].name), {"run", files_[i].string()},
                                {"train.save_final=true"}));
    for (int w : worlds_) check_world(w);
    check_bad_options();
    return interrupted_;
  }

  int count(Verdict v) const {
    return static_cast<int>(std::count_if(rows_.begin(), rows_.end(), [v](const Row& r) { return r.verdict == v; }));
  }

  /// The rows as a Markdown table.
  std::string table() const {
    std::vector<std::vector<std::string>> grid{{"check", "world", "result", "detail"}};
    for (const auto& r : rows_)
      grid.push_back({r.check, r.world,
                      r.verdict == Verdict::kPass ? "PASS" : r.verdict == Verdict::kFail ? "FAIL" : "n/a", r.detail});
    return detail::markdown_table(grid, "lrln");
  }

 private:
  bool allowed(int w) const { return world_overrides(entry_.traits.placement, w).has_value(); }

  /// The overrides that run the strategy under test at world size w (allowed(w)).
  std::vector<std::string> strategy_sets(int w) const {
    std::vector<std::string> sets{fmt::format("strategy.name={}", entry_.name)};
    const auto world_sets = world_overrides(entry_.traits.placement, w);
    for (const auto& [key, value] : world_sets.value()) sets.push_back(key + "=" + value);
    return sets;
  }

  /// Runs `strata ARGS` (`run` commands get --out), one progress line.
  Outcome run(const std::string& title, const std::string& label, std::vector<std::string> args,
              const std::vector<std::string>& sets = {}) {
    Outcome o;
    o.label = label;
    o.dir = dir_ / "runs" / label;
    if (interrupted_) return o;
    if (args.front() == "run") args.insert(args.end(), {"--out", o.dir.string()});
    for (const auto& s : sets) args.insert(args.end(), {"--set", s});
    std::cout << fmt::format("[{:>{}}/{}] {}: ", ++started_, std::to_string(total_).size(), total_, title)
              << std::flush;
    auto logged = run_logged(args, o.dir);
    const auto& child = logged.outcome;
    const double seconds = logged.seconds;
    o.lines = std::move(logged.lines);
    o.exit_code = child.exit_code;
    if (args.front() == "run") o.result = read_run_result(o.dir);
    if (!logged.log_error.empty()) {  // the run's record is incomplete: not a pass
      o.result.status = "failed";
      o.result.error = logged.log_error;
    }
    if (child.interrupted) interrupted_ = child.interrupted;
    std::cout << fmt::format("exit {} in {:.1f} s{}\n", o.exit_code, seconds,
                             args.front() != "run" || o.ok() ? "" : " (failed)");
    return o;
  }

  void add(std::string check, int world, Verdict verdict, std::string detail) {
    rows_.push_back({std::move(check), world > 0 ? std::to_string(world) : "-", verdict, std::move(detail)});
  }

  void check_world(int w) {
    if (!allowed(w)) {
      add("all checks", w, Verdict::kNotApplicable,
          fmt::format("'{}' runs in one process on one device: world size 1 only", entry_.name));
      return;
    }
    std::vector<Outcome> runs;
    for (std::size_t i = 0; i < workloads_.size(); ++i) {
      const auto& wl = workloads_[i];
      auto sets = strategy_sets(w);
      sets.push_back("train.save_final=true");
      runs.push_back(run(fmt::format("{} world {}, {}", entry_.name, w, wl.title),
                         fmt::format("{}_w{}_{}", entry_.name, w, wl.name), {"run", files_[i].string()}, sets));
      check_equivalence(w, wl, references_[i], runs.back());
    }
    check_memory(w, runs[0]);
    check_communication(w, runs);
    check_round_trip(w, runs[0]);
  }

  /// Exact strategies: every tensor of the final model within kExactTensorRel of single's (and the
  /// final loss); approximate ones: their declared tolerance on param_norm, the tensors reported.
  void check_equivalence(int w, const Workload& wl, const Outcome& ref, const Outcome& run) {
    const std::string check = fmt::format("equivalence {}", wl.title);
    if (!ref.ok())
      return add(check, w, Verdict::kFail, fmt::format("the reference run of single failed: {}", ref.failure()));
    if (!run.ok()) return add(check, w, Verdict::kFail, run.failure());
    const auto& eq = entry_.traits.equivalence;
    const auto diff = compare_saved_models(ref.dir / "final_model.pt", run.dir / "final_model.pt");
    const double loss = std::abs(run.number("final_loss") - ref.number("final_loss"));
    const std::string promise =
        eq.exact ? std::string("exact up to reduction order") : fmt::format("approximate by design: {}", eq.reason);
    if (!diff.problem.empty())
      return add(check, w, Verdict::kFail, fmt::format("the saved models cannot be compared: {}", diff.problem));
    std::string detail;
    bool ok = false;
    if (eq.exact) {
      const bool tensors_ok = diff.max_rel <= kExactTensorRel;
      const bool loss_ok = std::isfinite(loss) && loss <= kExactLossAbs;
      ok = tensors_ok && loss_ok;
      detail = fmt::format("final model rel {:.1e} {} {:.0e} (worst: {}), final_loss abs {:.1e} {} {:.0e}",
                           diff.max_rel, tensors_ok ? "<=" : ">", kExactTensorRel,
                           diff.tensor.empty() ? "none differs" : diff.tensor, loss,
                           loss_ok ? "<=" : ">", kExactLossAbs);
    } else {
      const double rel = relative(run.number("param_norm"), ref.number("param_norm"));
      ok = std::isfinite(rel) && rel <= eq.rel_tolerance;
      detail = fmt::format("param_norm rel {:.1e} {} {:.0e}; final model rel {:.1e} (worst: {})", rel,
                           ok ? "<=" : ">", eq.rel_tolerance, diff.max_rel, diff.tensor);
    }
    add(check, w, ok ? Verdict::kPass : Verdict::kFail,
        ok ? fmt::format("{} ({})", detail, promise) : fmt::format("{}; declared {}", detail, promise));
  }

  /// Model state per rank. Declared (Footprint::Memory): DESIGN §5's formula for fp32 AdamW (4 Psi
  /// parameters, 4 Psi gradients, 8 Psi optimizer state, each / N where sharded) within 5% plus
  /// padding (< N elements per flat group, at most one group per parameter tensor) and AdamW's step
  /// counts. Undeclared: between the 1/N share and twice the full model.
  void check_memory(int w, const Outcome& run) {
    if (!run.ok()) return add("memory", w, Verdict::kFail, run.failure());
    const double full = run.number("parameters") * 4;
    const double tensors = run.number("parameter_tensors");
    const auto& declared = entry_.traits.footprint.memory;
    struct Item {
      const char* name;
      double bytes, low, high;
      std::string why;
    };
    std::vector<Item> items;
    if (declared) {
      const double pad = 4.0 * w * tensors;  // per float32 copy
      const auto part = [&](const char* name, const char* key, bool sharded, double copies, double extra) {
        const double expected = copies * full / (sharded ? w : 1);
        items.push_back({name, run.number(key), expected * (1 - kMemoryRel),
                         expected * (1 + kMemoryRel) + copies * pad + extra,
                         fmt::format("{:.0f} B expected{}", expected, sharded ? " (sharded)" : "")});
      };
      part("params", "memory.model_state_bytes.params", declared->params, 1, 0);
      part("grads", "memory.model_state_bytes.grads", declared->grads, 1, 0);
      part("optimizer", "memory.model_state_bytes.optimizer", declared->optimizer, 2, 8 * tensors);
    } else {
      items = {{"params", run.number("memory.model_state_bytes.params"), full / w * 0.95, 2 * full, "fp32 parameters"},
               {"grads", run.number("memory.model_state_bytes.grads"), full / w * 0.95, 2 * full, "fp32 gradients"},
               {"optimizer", run.number("memory.model_state_bytes.optimizer"), 2 * full / w * 0.95, 2 * full * 1.05,
                "2 AdamW states"}};
    }
    std::string held, wrong;
    for (const auto& it : items) {
      held += fmt::format("{}{} {:.0f} B", held.empty() ? "" : ", ", it.name, it.bytes);
      if (!(std::isfinite(it.bytes) && it.bytes > 0 && it.bytes >= it.low && it.bytes <= it.high))
        wrong += fmt::format("; {} {:.0f} B is outside [{:.0f}, {:.0f}] B ({} of {:.0f} parameters over {} ranks)",
                             it.name, it.bytes, it.low, it.high, it.why, full / 4, w);
    }
    if (!std::isfinite(full) || full <= 0 || !std::isfinite(tensors))
      wrong += "; summary.json has no parameter count";
    add("memory", w, wrong.empty() ? Verdict::kPass : Verdict::kFail,
        fmt::format("{} per rank; full fp32 parameters {:.0f} B; {}{}", held, full,
                    declared ? "DESIGN §5 formula within 5% + padding" : "undeclared: consistency bounds", wrong));
  }

  /// Bus bytes per step. Declared (Footprint::Traffic): DESIGN §8's (per_step + per_micro_batch x M)
  /// x (N-1)/N x 4 Psi within 2% plus padding and the norm all-reduces, on every workload.
  /// Undeclared: counted above world size 1. At world size 1: none.
  void check_communication(int w, const std::vector<Outcome>& runs) {
    const auto& declared = entry_.traits.footprint.traffic;
    std::string numbers, wrong;
    for (std::size_t i = 0; i < runs.size(); ++i) {
      const auto& run = runs[i];
      if (!run.ok()) return add("communication", w, Verdict::kFail, run.failure());
      const double bus = run.number("comm.bus_bytes_per_step"), calls = run.number("comm.calls_per_step");
      const double full = run.number("parameters") * 4, tensors = run.number("parameter_tensors");
      const int micro = workloads_[i].micro_batches;
      numbers += fmt::format("{}{}: {:.0f} B/step in {:.3g} calls", numbers.empty() ? "" : "; ", workloads_[i].title,
                             bus, calls);
      if (w == 1) {
        if (bus != 0) wrong += fmt::format("; {}: expected no traffic at world size 1", workloads_[i].title);
      } else if (declared) {
        const double units = declared->per_step + declared->per_micro_batch * micro;
        const double factor = static_cast<double>(w - 1) / w;
        // The sub-group level: every rank of the check runs on this host, so a size of 0 (the
        // ranks of one host) is the world size.
        const int g = subgroup_size(*declared, w);
        const double sub_units = declared->subgroup_per_micro_batch * micro;
        const double sub_factor = g > 0 ? static_cast<double>(g - 1) / g : 0.0;
        const double expected = (units * factor + sub_units * sub_factor) * full;
        const double slack = (units * factor + sub_units * sub_factor) * 4.0 * w * tensors + 2 * factor * 8 * (1 + micro);
        const std::string formula =
            sub_units > 0 ? fmt::format("{:g} x (N-1)/N + {:g} x (g-1)/g with g = {} x 4 Psi", units, sub_units, g)
                          : fmt::format("{:g} x (N-1)/N x 4 Psi", units);
        auto matches = [&](double e) { return std::abs(bus - e) <= kTrafficRel * e + slack; };
        // Two gathers a micro-batch declared (zero3, FULL_SHARD): the kit keeps the model's last
        // unit gathered from its forward into its backward, one gather of it fewer (at its level).
        const double last = units_gathered_twice(*declared) ? 4.0 * last_unit_params(i) : 0.0;
        const double kept = expected - micro * (sub_units > 0 ? sub_factor : factor) * last;
        if (last > 0 && matches(kept) && std::abs(bus - kept) < std::abs(bus - expected)) {
          numbers += fmt::format(" (expected {:.0f}: the last unit's {:.0f} B gathered once a micro-batch)", kept, last);
        } else {
          numbers += fmt::format(" (expected {:.0f})", expected);
          if (!matches(expected))
            wrong += fmt::format("; {}: {:.0f} B/step is not {:.0f} B within 2% ({}{})", workloads_[i].title, bus, expected,
                                 formula,
                                 last > 0 ? fmt::format(", nor {:.0f} B with the last unit gathered once", kept) : "");
        }
      } else if (!(bus > 0 && calls > 0)) {
        wrong += fmt::format("; {}: traffic is not accounted (every collective must go through strata::Comm)",
                             workloads_[i].title);
      }
    }
    add("communication", w, wrong.empty() ? Verdict::kPass : Verdict::kFail,
        numbers + (declared || w == 1 ? "" : "; undeclared: counted only") + wrong);
  }

  /// Whether a declaration counts two gathers of every unit a micro-batch (forward and backward):
  /// 3 units (two all-gathers and a reduce-scatter), or the second gather at the sub-group level.
  static bool units_gathered_twice(const Footprint::Traffic& declared) {
    return declared.subgroup_per_micro_batch > 0 ? declared.subgroup_per_micro_batch >= 1 : declared.per_micro_batch >= 3;
  }

  /// Trainable parameters of the last unit of workload `i`'s model (built as `run` builds it).
  double last_unit_params(std::size_t i) {
    if (last_unit_[i] < 0) {
      const auto units = estimate::model_units(load_experiment(files_[i]));
      last_unit_[i] = units.empty() ? 0 : units.back().params;
    }
    return last_unit_[i];
  }

  /// The sub-group size g of a two-level traffic declaration at world size w: the strategy
  /// option it names, at its default (the check runs with defaults), 0 meaning the ranks of one
  /// host (all w here); 0 when nothing is declared at that level.
  int subgroup_size(const Footprint::Traffic& declared, int w) const {
    if (declared.subgroup_per_micro_batch == 0) return 0;
    const OptionSpec* spec = entry_.schema.find(declared.subgroup_option);
    if (spec == nullptr || !std::holds_alternative<std::int64_t>(spec->default_value))
      throw PluginError(entry_.library, fmt::format("strategy '{}' declares sub-group traffic over the option '{}', which is not an "
                                    "integer option of its schema",
                                    entry_.name, declared.subgroup_option),
                        "Name the integer [strategy] option that holds the sub-group size in "
                        "Footprint::Traffic::with_subgroup().");
    const auto g = std::get<std::int64_t>(spec->default_value);
    return g > 0 ? static_cast<int>(std::min<std::int64_t>(g, w)) : w;
  }

  /// The saved full model, loaded by `single` for one step at a negligible learning rate, has
  /// the saved run's final parameters.
  void check_round_trip(int w, const Outcome& run) {
    const std::string check = "state-dict round trip";
    if (!run.ok()) return add(check, w, Verdict::kFail, run.failure());
    const fs::path model = run.dir / "final_model.pt";
    if (!fs::exists(model))
      return add(check, w, Verdict::kFail, "the run wrote no final_model.pt (train.save_final = true)");
    const Outcome reload = run_reload(w, model);
    if (!reload.ok())
      return add(check, w, Verdict::kFail, fmt::format("single could not load final_model.pt: {}", reload.failure()));
    const double rel = relative(reload.number("param_norm"), run.number("param_norm"));
    const bool ok = std::isfinite(rel) && rel <= kRoundTripRel;
    add(check, w, ok ? Verdict::kPass : Verdict::kFail,
        fmt::format("param_norm rel {:.1e} {} {:.0e} after single loaded final_model.pt{}", rel, ok ? "<=" : ">",
                    kRoundTripRel,
                    ok ? "" : fmt::format(" (saved {:.9f}, loaded {:.9f})", run.number("param_norm"),
                                          reload.number("param_norm"))));
  }

  Outcome run_reload(int w, const fs::path& model) {
    return run(fmt::format("single loads {} world {}'s final_model.pt", entry_.name, w),
               fmt::format("single_loads_{}_w{}", entry_.name, w), {"run", files_[0].string()},
               {fmt::format("train.init_from={}", model.string()), fmt::format("optimizer.lr={}", kReloadLr),
                "train.steps=1"});
  }

  /// `strata validate` with an unknown strategy option, then with each constrained option set to
  /// a value its constraint rejects: exit 2, one error paragraph naming the option, no crash.
  void check_bad_options() {
    check_rejected(kUnknownOption, "1", "unknown option");
    for (const auto& [option, v] : violations_) check_rejected(option, v.toml, fmt::format("must be {}", v.rule));
  }

  void check_rejected(const std::string& option, const std::string& value, const std::string& why) {
    const std::string key = fmt::format("strategy.{}", option);
    const std::string check = fmt::format("bad option {}={}", key, value);
    const Outcome o = run(fmt::format("validate {}={} ({})", key, value, why), fmt::format("validate_{}", option),
                          {"validate", files_[0].string(), "--set", fmt::format("strategy.name={}", entry_.name),
                           "--set", fmt::format("{}={}", key, value)});
    if (o.exit_code < 0) return add(check, 0, Verdict::kFail, o.failure());
    std::string problems, error;
    int errors = 0;
    for (const auto& line : o.lines) {
      if (line.rfind("error:", 0) == 0) {
        ++errors;
        error = line;
      }
      for (const char* marker : kCrashMarkers)
        if (line.find(marker) != std::string::npos) problems += fmt::format("; crash marker '{}'", marker);
    }
    if (o.exit_code != 2) problems += fmt::format("; exit {} instead of 2", o.exit_code);
    if (errors != 1) problems += fmt::format("; {} `error:` paragraphs instead of 1", errors);
    if (error.find(option) == std::string::npos) problems += fmt::format("; the error does not name {}", key);
    add(check, 0, problems.empty() ? Verdict::kPass : Verdict::kFail,
        problems.empty() ? fmt::format("{}: exit 2, {}", why, clip(error, 160))
                         : fmt::format("{}{} [{}]", why, problems, (o.dir / "output.log").string()));
  }

  const RegistryEntry& entry_;
  std::vector<int> worlds_;
  fs::path dir_;
  std::vector<Workload> workloads_;  ///< the experiments every world size runs
  std::vector<fs::path> files_;  ///< the workloads' experiment files, in workloads_ order
  std::vector<double> last_unit_;  ///< per workload: its model's last unit's parameters (-1: not built yet)
  std::vector<std::pair<std::string, detail::Violation>> violations_;
  std::vector<Outcome> references_;  ///< single on each workload
  std::vector<Row> rows_;
  int total_ = 0, started_ = 0;
  int interrupted_ = 0;
};

/// A fresh directory strata-check-NAME-XXXXXX under the system's temporary directory ($TMPDIR).
fs::path fresh_temp_directory(const std::string& name) {
  std::string safe = name;
  for (char& c : safe)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') c = '_';
  std::string pattern = (fs::temp_directory_path() / fmt::format("strata-check-{}-XXXXXX", safe)).string();
  if (!::mkdtemp(pattern.data()))
    throw Error(fmt::format("cannot create a directory for the check's runs ({}): {}", pattern, std::strerror(errno)),
                "Set TMPDIR to a writable directory, or give --out DIR.");
  return pattern;
}

/// The suite of one strategy (`entry`; request.strategy is its name).
int check_one(const CheckRequest& request, const RegistryEntry& entry) {
  std::vector<int> worlds = request.world_sizes;
  std::sort(worlds.begin(), worlds.end());
  worlds.erase(std::unique(worlds.begin(), worlds.end()), worlds.end());
  if (worlds.empty() || worlds.front() < 1)
    throw UsageError("`strata check` needs positive world sizes.", "Write for example `--world-sizes 1,2,3`.");
  const std::vector<Workload> workloads = workloads_of(request.models);
  const std::int64_t batch = detail::common_global_batch(worlds, kMicroBatches, kMinGlobalBatch);
  if (batch > kMaxGlobalBatch)
    throw UsageError(fmt::format("world sizes {} need a global batch of {} (a multiple of each of them and of {} "
                                 "micro-batches); the check allows at most {}.",
                                 fmt::join(worlds, ","), batch, kMicroBatches, kMaxGlobalBatch),
                     "Check fewer world sizes at once.");

  fs::path dir = request.out;
  if (dir.empty()) {
    dir = fresh_temp_directory(request.strategy);
  } else {
    if (fs::exists(dir) && !(fs::is_directory(dir) && fs::is_empty(dir)))
      throw UsageError(fmt::format("--out {} exists and is not an empty directory.", dir.string()),
                       "Choose a new --out directory (the check writes its experiments and runs there).");
    fs::create_directories(dir);
  }
  // The experiments, written first and validated here with `single`: a missing model or
  // dataset plugin is a configuration error (exit 2), not a failure of the strategy.
  try {
    for (const auto& w : workloads) {
      const fs::path file = dir / (std::string(w.name) + ".toml");
      write_text_file(file, workload_toml(w, batch));
      check_experiment(load_experiment(file));
    }
  } catch (...) {
    std::error_code ignored;
    if (request.out.empty()) fs::remove_all(dir, ignored);  // nothing ran: leave no temporary directory
    throw;
  }

  const auto& eq = entry.traits.equivalence;
  std::cout << fmt::format("strata check {}: world sizes {}; {} steps, global batch {}; equivalence with single {}; "
                           "runs in {}\n",
                           entry.name, fmt::join(worlds, ", "), kSteps, batch,
                           eq.exact ? std::string("exact up to reduction order")
                                    : fmt::format("within rel {:g} (approximate by design: {})", eq.rel_tolerance,
                                                  eq.reason),
                           dir.string())
            << std::flush;
  Checker checker(entry, worlds, dir, workloads);
  const int interrupted = checker.run_all();
  const std::string table = checker.table();
  write_text_file(dir / "check.md", table);
  const int passed = checker.count(Verdict::kPass), failed = checker.count(Verdict::kFail);
  const int na = checker.count(Verdict::kNotApplicable);
  std::cout << "\n" << table << "\n";
  std::cout << fmt::format("strata check {}: {} passed, {} failed{}{}\n", entry.name, passed, failed,
                           na ? fmt::format(", {} n/a", na) : std::string(), interrupted ? " (interrupted)" : "");
  if (failed > 0 || interrupted || !request.out.empty()) {
    std::cout << fmt::format("outputs: {} (the experiments, and each run's output.log and summary.json under runs/)\n",
                             dir.string());
  } else {
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }
  if (interrupted) return 128 + interrupted;
  return failed > 0 ? 1 : 0;
}

}  // namespace

int check_strategy(const CheckRequest& request) {
  require_single_process("check");
  // "ddp,zero1,zero3": every name is looked up before any run, then each strategy's suite runs in
  // turn, in --out DIR/NAME when --out is given.
  const std::vector<std::string> names = parse_strategy_names(request.strategy);
  Registry registry;
  load_registry(registry, nullptr);
  std::vector<const RegistryEntry*> entries;
  for (const auto& name : names) entries.push_back(&registry.at(PluginKind::kStrategy, name));
  if (names.size() == 1) return check_one(request, *entries.front());
  if (!request.out.empty() && fs::exists(request.out) && !(fs::is_directory(request.out) && fs::is_empty(request.out)))
    throw UsageError(fmt::format("--out {} exists and is not an empty directory.", request.out.string()),
                     "Choose a new --out directory (the check writes each strategy's runs in a folder of it).");
  std::vector<std::string> failed;
  for (std::size_t i = 0; i < names.size(); ++i) {
    CheckRequest one = request;
    one.strategy = names[i];
    if (!request.out.empty()) one.out = request.out / names[i];
    const int code = check_one(one, *entries[i]);
    if (code >= 128) return code;  // interrupted: stop here
    if (code != 0) failed.push_back(names[i]);
    std::cout << "\n";
  }
  std::cout << fmt::format("strata check {}: {} of {} strategies passed{}\n", request.strategy,
                           names.size() - failed.size(), names.size(),
                           failed.empty() ? std::string() : fmt::format(" (failed: {})", fmt::join(failed, ", ")));
  return failed.empty() ? 0 : 1;
}

}  // namespace strata
