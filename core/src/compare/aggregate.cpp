// A comparison's combinations summarized: spreads, intervals, verdicts, ranks and noise. Every
// comparison of two timings is made on their ranges over repeats (stats::compare_times), never on
// medians alone: on a shared machine the medians of identical work differ by more than the
// strategies do.

#include "compare/aggregate.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

namespace strata {

namespace {

/// The cell of (series, world), or end.
std::vector<ReportCell>::iterator find_cell(std::vector<ReportCell>& cells, const std::string& series, int world) {
  return std::find_if(cells.begin(), cells.end(),
                      [&](const ReportCell& c) { return c.series == series && c.world_size == world; });
}

/// The verdict of `c` against `base`: step times under strong scaling (the same global work per
/// step), throughputs under weak scaling (compare_times ranks lower first, so the sides swap).
stats::Verdict verdict_of(const ReportCell& c, const ReportCell& base, bool weak) {
  return weak ? stats::compare_times(base.samples_per_s, c.samples_per_s) : stats::compare_times(c.step_time_s, base.step_time_s);
}

}  // namespace

std::string efficiency_flag(const stats::Interval& efficiency) {
  if (stats::suspect_efficiency(efficiency)) return "suspect";
  if (std::isfinite(efficiency.high) && efficiency.high > 1.0) return "within noise of 100%";
  return {};
}

Aggregate aggregate(const std::vector<MeasuredRun>& runs, const AggregateOptions& options) {
  const bool weak = options.scaling == "weak";
  Aggregate out;
  std::map<std::pair<std::string, int>, std::vector<double>> step, samples, train, peak, tensors;
  std::map<std::pair<std::string, int>, std::vector<std::pair<std::string, double>>> repeats;
  std::map<std::pair<std::string, int>, std::string> work;
  std::map<std::pair<std::string, int>, std::pair<std::string, int>> baseline;
  for (const auto& r : runs) {
    auto cell = find_cell(out.cells, r.series, r.world_size);
    if (cell == out.cells.end()) {
      ReportCell c;
      c.series = r.series;
      c.world_size = r.world_size;
      c.baseline = r.baseline_series + "@" + std::to_string(r.baseline_world_size);
      c.is_baseline = r.baseline_series == r.series && r.baseline_world_size == r.world_size;
      out.cells.push_back(std::move(c));
      cell = out.cells.end() - 1;
    }
    const std::pair<std::string, int> key{r.series, r.world_size};
    work[key] = r.work;
    baseline[key] = {r.baseline_series, r.baseline_world_size};
    cell->labels.push_back(r.label);
    ++cell->runs;
    if (!r.result || r.result->status != "ok") continue;
    ++cell->ok;
    const StepTiming t = r.result->step_timing();
    if (!t.steady) {
      cell->steady = false;
      out.not_steady.push_back(r.label);
    }
    step[key].push_back(t.step_time_s);
    samples[key].push_back(t.samples_per_s);
    train[key].push_back(r.result->number("train_time_s"));
    peak[key].push_back(r.result->number("memory.peak_bytes"));
    tensors[key].push_back(r.result->number("memory.peak_tensor_bytes"));
    repeats[key].emplace_back(r.label, t.step_time_s);
  }
  for (auto& c : out.cells) {
    const std::pair<std::string, int> key{c.series, c.world_size};
    c.step_time_s = stats::spread(step[key]);
    c.samples_per_s = stats::spread(samples[key]);
    c.train_time_s = stats::spread(train[key]);
    c.peak_bytes = stats::spread(peak[key]);
    c.peak_tensor_bytes = stats::spread(tensors[key]);
  }

  // Against the baseline: intervals over every pairing of the two cells' runs.
  const std::vector<ReportCell> measured = out.cells;
  const auto base_of = [&](const ReportCell& c) -> const ReportCell* {
    const auto& [series, world] = baseline[{c.series, c.world_size}];
    for (const auto& b : measured)
      if (b.series == series && b.world_size == world) return b.ok > 0 ? &b : nullptr;
    return nullptr;
  };
  for (auto& c : out.cells) {
    const ReportCell* base = base_of(c);
    if (!base || c.ok == 0) continue;
    c.speedup = weak ? stats::ratio(c.samples_per_s, base->samples_per_s) : stats::ratio(base->step_time_s, c.step_time_s);
    c.efficiency = stats::scaled(c.speedup, static_cast<double>(base->world_size) / c.world_size);
    c.verdict = verdict_of(c, *base, weak);
    c.suspect = stats::suspect_efficiency(c.efficiency);
    c.efficiency_flag = efficiency_flag(c.efficiency);
  }
  for (const auto& r : runs) {
    std::optional<double> speedup, efficiency;
    const auto cell = find_cell(out.cells, r.series, r.world_size);
    const ReportCell* base = base_of(*cell);
    if (base && r.result && r.result->status == "ok") {
      const StepTiming t = r.result->step_timing();
      const double s = weak ? t.samples_per_s / base->samples_per_s.median : base->step_time_s.median / t.step_time_s;
      if (std::isfinite(s) && s > 0) {
        speedup = s;
        efficiency = s * base->world_size / r.world_size;
      }
    }
    out.speedup.push_back(speedup);
    out.efficiency.push_back(efficiency);
  }

  // Ranks among the cells of one world size doing the same work: only a cell faster in every run
  // ranks before another; overlapping ranges are within noise of each other.
  for (auto& c : out.cells) {
    if (c.ok == 0) continue;
    c.rank = 1;
    for (const auto& other : measured) {
      if (other.ok == 0 || other.world_size != c.world_size || other.series == c.series) continue;
      if (work[{other.series, other.world_size}] != work[{c.series, c.world_size}]) continue;
      const auto v = stats::compare_times(other.step_time_s, c.step_time_s);
      if (v == stats::Verdict::kFaster) ++c.rank;
      if (v == stats::Verdict::kWithinNoise) c.within_noise_of.push_back(other.series + "@" + std::to_string(other.world_size));
    }
  }

  // Identical work: the repeats of one combination, then the world-size-1 cells of the same work
  // (any strategy: one device computes the whole global batch).
  for (auto& c : out.cells) {
    auto finding = stats::identical_work_noise("repeats of " + c.series + "@" + std::to_string(c.world_size),
                                               repeats[{c.series, c.world_size}], options.noise_threshold);
    if (!finding) continue;
    c.noisy = true;
    out.noise.push_back(std::move(*finding));
  }
  std::vector<std::string> works;
  for (const auto& c : out.cells)
    if (c.world_size == 1 && std::find(works.begin(), works.end(), work[{c.series, 1}]) == works.end())
      works.push_back(work[{c.series, 1}]);
  for (const auto& w : works) {
    std::vector<std::pair<std::string, double>> members;
    std::vector<const ReportCell*> group;
    for (const auto& c : out.cells)
      if (c.world_size == 1 && work[{c.series, 1}] == w && c.ok > 0) {
        members.emplace_back(c.series + "@1", c.step_time_s.median);
        group.push_back(&c);
      }
    auto finding = stats::identical_work_noise(
        "world-size-1 runs of the same work" + (w.empty() ? std::string() : " (" + w + ")"), members,
        options.noise_threshold);
    if (!finding) continue;
    // Ranges that do not overlap at all, over interleaved rounds, are a steady difference (a
    // strategy's own bookkeeping at world size 1, large beside a tiny model's step), not the
    // machine's noise: said so, since more repeats would not remove it.
    const auto by_median = [](const ReportCell* a, const ReportCell* b) { return a->step_time_s.median < b->step_time_s.median; };
    const auto [fast, slow] = std::minmax_element(group.begin(), group.end(), by_median);
    if (stats::compare_times((*fast)->step_time_s, (*slow)->step_time_s) == stats::Verdict::kFaster)
      finding->note = fmt::format("{} was slower than {} in every run: a steady overhead of the strategy at this "
                                  "size, not the machine's noise alone",
                                  (*slow)->name(), (*fast)->name());
    out.noise.push_back(std::move(*finding));
  }
  return out;
}

std::vector<std::string> loose_cells(const std::vector<ReportCell>& cells, double rel) {
  std::vector<std::string> out;
  for (const auto& c : cells) {
    if (c.ok == 0) continue;  // failed everywhere: more rounds would not tighten it
    const double range = c.step_time_s.relative_range();
    if (c.ok == 1) out.push_back(c.name() + " (1 run)");
    else if (!(range <= rel)) out.push_back(fmt::format("{} ({:.0f}%)", c.name(), 100 * range));
  }
  return out;
}

}  // namespace strata
