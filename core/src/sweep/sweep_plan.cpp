// The combinations of a sweep: the cross product of its axes, each strategy's world size mapped by
// its placement, weak scaling's global batch, every run's overrides with where each comes from, and
// the order in which each round runs them.
#include <algorithm>
#include <cctype>
#include <limits>
#include <random>

#include <fmt/format.h>

#include "sweep/sweep.hpp"
#include "strata/registry.hpp"
#include "text/suggest.hpp"

namespace strata {

namespace {

/// A run's label part: letters, digits, '.', '_' and '-', other runs of characters as one '_'.
std::string sanitize(const std::string& text) {
  std::string out;
  for (char c : text) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
    if (ok) out += c;
    else if (!out.empty() && out.back() != '_') out += '_';
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out.empty() ? "x" : out;
}

}  // namespace

std::optional<std::vector<std::pair<std::string, std::string>>> world_overrides(const Placement& placement,
                                                                                 int world) {
  using Kind = Placement::Kind;
  if (placement.kind == Kind::kOneDevice && world != 1) return std::nullopt;
  std::vector<std::pair<std::string, std::string>> sets{
      {"distributed.nproc", std::to_string(placement.kind == Kind::kRankPerDevice ? world : 1)}};
  if (placement.kind == Kind::kDevicesInProcess)
    sets.emplace_back("strategy." + placement.devices_option, std::to_string(world));
  return sets;
}

SweepPlan plan_sweep(const Sweep& sweep, const Registry& registry, const std::string& base_strategy,
                     int base_world_size, std::int64_t base_global_batch) {
  SweepPlan plan;
  const SweepAxis* world_axis = nullptr;
  const SweepAxis* batch_axis = nullptr;
  for (const auto& axis : sweep.axes) {
    if (axis.key == "world_size") world_axis = &axis;
    if (axis.key == "train.global_batch_size") batch_axis = &axis;
  }
  plan.baseline_world_size = base_world_size;
  for (const auto& [key, value] : sweep.baseline)
    if (key == "world_size") plan.baseline_world_size = static_cast<int>(std::stoll(value));
  if (sweep.scaling == "weak" && batch_axis)
    throw ConfigError(batch_axis->where, "compare.axes.train.global_batch_size",
                      "weak scaling derives each run's global batch; it cannot also be an axis.",
                      "Use scaling = \"strong\" to sweep the global batch, or drop the axis.");

  // Strategies named by the axis must exist (checked at the value's position).
  for (const auto& axis : sweep.axes) {
    if (axis.key != "strategy") continue;
    for (const auto& v : axis.values)
      if (!registry.find(PluginKind::kStrategy, v.display)) {
        const auto known = registry.names(PluginKind::kStrategy);
        throw ConfigError(v.where, "compare.axes.strategy",
                          fmt::format("unknown strategy '{}'.{} Available: {}.", v.display,
                                      detail::did_you_mean(v.display, known), detail::join(known)),
                          "Run `strata plugins` to list the strategies found on the plugin search path.");
      }
  }

  // Cross product, the first axis outermost.
  std::vector<std::size_t> index(sweep.axes.size(), 0);
  while (true) {
    SweepRun run;
    run.strategy = base_strategy;
    run.world_size = base_world_size;
    const SweepValue* world_value = nullptr;
    for (std::size_t a = 0; a < sweep.axes.size(); ++a) {
      const auto& axis = sweep.axes[a];
      const auto& v = axis.values[index[a]];
      run.values.emplace_back(axis.key, v.display);
      if (axis.key == "strategy") run.strategy = v.display;
      if (axis.key == "world_size") {
        run.world_size = static_cast<int>(std::stoll(v.display));
        world_value = &v;
      }
    }
    const auto add = [&](const std::string& key, const std::string& toml, const SourceLocation& where) {
      run.overrides.push_back(key + "=" + toml);
      run.origins.push_back(where);
    };
    for (const auto& o : sweep.set) add(o.key, o.toml, o.where);
    for (std::size_t a = 0; a < sweep.axes.size(); ++a) {
      const auto& axis = sweep.axes[a];
      const auto& v = axis.values[index[a]];
      if (axis.key == "strategy") add("strategy.name", v.toml, v.where);
      else if (axis.key != "world_size") add(axis.key, v.toml, v.where);
    }
    const SourceLocation world_at = world_value ? world_value->where : (world_axis ? world_axis->where : sweep.base_at);
    const auto& placement = registry.at(PluginKind::kStrategy, run.strategy).traits.placement;
    std::string label = sanitize(run.strategy) + "-w" + std::to_string(run.world_size);
    for (const auto& [key, display] : run.values)
      if (key != "strategy" && key != "world_size")
        label.append("-").append(sanitize(key.substr(key.rfind('.') + 1))).append(sanitize(display));
    const auto world_sets = world_overrides(placement, run.world_size);
    const bool applies = world_sets.has_value();
    if (applies)
      for (const auto& [key, value] : *world_sets) add(key, value, world_at);
    else
      plan.skipped.push_back(fmt::format("{} (strategy '{}' runs on one device)", label, run.strategy));
    if (applies && sweep.scaling == "weak") {
      const std::int64_t scaled = base_global_batch * run.world_size;
      if (scaled % plan.baseline_world_size != 0)
        throw ConfigError(sweep.scaling_at, "compare.scaling",
                          fmt::format("weak scaling: global batch {} x world size {} is not divisible by the baseline "
                                      "world size {}.",
                                      base_global_batch, run.world_size, plan.baseline_world_size),
                          "Choose a base global batch that is a multiple of the baseline world size.");
      add("train.global_batch_size", std::to_string(scaled / plan.baseline_world_size), sweep.scaling_at);
    }
    if (applies) {
      run.label = label;
      run.combination = plan.combinations.size();
      plan.combinations.push_back(std::move(run));
    }
    // Next combination (odometer, last axis fastest); no axes: one run.
    bool done = true;
    for (std::size_t a = sweep.axes.size(); a-- > 0;) {
      if (++index[a] < sweep.axes[a].values.size()) {
        done = false;
        break;
      }
      index[a] = 0;
    }
    if (done) break;
  }

  plan.numbered = sweep.max_rounds() > 1;
  for (std::size_t c = 0; c < plan.combinations.size(); ++c)
    for (std::int64_t r = 1; r <= sweep.repeats; ++r) plan.runs.push_back(run_of(plan, c, static_cast<int>(r)));

  // Every run needs its baseline among the runs.
  for (const auto& run : plan.combinations) {
    auto values = run.values;
    for (auto& [key, display] : values)
      for (const auto& [bkey, bvalue] : sweep.baseline)
        if (key == bkey) display = bvalue;
    const bool found = std::any_of(plan.combinations.begin(), plan.combinations.end(),
                                   [&](const SweepRun& r) { return r.values == values; });
    if (!found)
      throw ConfigError(sweep.baseline_at, "compare.baseline",
                        fmt::format("the baseline of run {} is not run (it does not apply: {}).", run.label,
                                    detail::join(plan.skipped)),
                        "Choose a baseline that is among the runs, e.g. { strategy = \"single\", world_size = 1 }.");
  }
  return plan;
}

SweepRun run_of(const SweepPlan& plan, std::size_t combination, int repeat) {
  SweepRun run = plan.combinations.at(combination);
  run.repeat = repeat;
  if (plan.numbered) run.label += fmt::format("-r{}", repeat);
  return run;
}

namespace {

/// SplitMix64 (Steele et al. 2014): spreads (seed, round) over the 64 bits of the generator's seed.
std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

std::vector<std::size_t> round_order(std::size_t combinations, std::int64_t seed, int round, bool shuffle) {
  std::vector<std::size_t> order(combinations);
  for (std::size_t i = 0; i < combinations; ++i) order[i] = i;
  if (!shuffle) return order;
  // std::shuffle and std::uniform_int_distribution are implementation-defined; mt19937_64's output
  // is not, and rejection sampling keeps each draw unbiased.
  std::mt19937_64 random(mix64(static_cast<std::uint64_t>(seed) ^ mix64(static_cast<std::uint64_t>(round))));
  for (std::size_t i = combinations; i > 1; --i) {
    const std::uint64_t bound = i, limit = std::numeric_limits<std::uint64_t>::max() - std::numeric_limits<std::uint64_t>::max() % bound;
    std::uint64_t draw = random();
    while (draw >= limit) draw = random();
    std::swap(order[i - 1], order[static_cast<std::size_t>(draw % bound)]);
  }
  return order;
}

std::vector<SweepRun> round_runs(const SweepPlan& plan, const CompareMeasure& measure, int round) {
  std::vector<SweepRun> runs;
  for (std::size_t c : round_order(plan.combinations.size(), measure.seed, round, measure.shuffle))
    runs.push_back(run_of(plan, c, round));
  return runs;
}

}  // namespace strata
