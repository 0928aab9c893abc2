// The charts of report.html. A strategy has one colour in every chart of every report
// (strategy_color: keyed by its name, never by its position); series of one strategy that differ in
// another axis of the sweep are told apart by their dash. Every figure against world size is drawn
// from the cells (report_cells: spreads over repeats, intervals against the baseline): the median
// as the point, min..max as its error bar, and a glyph where a result is within noise of the
// baseline (open circle) or suspect (outlined triangle), which the legend explains.

#include "compare/report_charts.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>

#include <fmt/format.h>

#include "compare/svg.hpp"
#include "train/median.hpp"

namespace strata {

namespace {

using svg::escape;

constexpr double kWidth = 900;  // every chart's width, in px at 100% zoom
constexpr const char* kDashes[] = {"", "7 4", "2 3", "10 3 2 3", "4 2 4 6"};
constexpr const char* kIdeal = "#777";

/// What the charts need of the report: series in order, world sizes, cells, medians over repeats.
class View {
 public:
  View(const Report& report, const std::vector<ReportCell>& cells) : report_(report), cells_(cells) {
    for (const auto& r : report.runs) {
      if (std::find(series_.begin(), series_.end(), r.series) == series_.end()) series_.push_back(r.series);
      if (std::find(worlds_.begin(), worlds_.end(), r.world_size) == worlds_.end()) worlds_.push_back(r.world_size);
    }
    std::sort(worlds_.begin(), worlds_.end());
  }

  const std::vector<std::string>& series() const { return series_; }
  const std::vector<int>& worlds() const { return worlds_; }
  const Report& report() const { return report_; }

  static std::string strategy_of(const std::string& series) { return series.substr(0, series.find(", ")); }
  std::string color(const std::string& series) const { return strategy_color(strategy_of(series)); }
  /// Solid for a strategy's first series; the next series of the same strategy (another value of
  /// an axis) get dashes.
  std::string dash(const std::string& series) const {
    std::size_t same = 0;
    for (const auto& s : series_) {
      if (s == series) break;
      same += strategy_of(s) == strategy_of(series);
    }
    return kDashes[same % std::size(kDashes)];
  }

  /// The cell of (series, world) with a successful run; nullptr when none.
  const ReportCell* cell(const std::string& series, int world) const {
    for (const auto& c : cells_)
      if (c.series == series && c.world_size == world) return c.ok > 0 ? &c : nullptr;
    return nullptr;
  }

  /// Median over the successful runs of (series, world); NaN when none has the figure.
  double median_of(const std::string& series, int world, const std::function<double(const ReportRun&)>& f) const {
    std::vector<double> values;
    for (const auto& r : report_.runs)
      if (r.ok() && r.series == series && r.world_size == world) values.push_back(f(r));
    return median(values);
  }
  double median_of(const std::string& series, int world, const std::string& path) const {
    return median_of(series, world, [&](const ReportRun& r) { return r.number(path); });
  }

  /// (series, world) pairs with a successful run, series by series: the bars of the bar charts.
  std::vector<std::pair<std::string, int>> cells() const {
    std::vector<std::pair<std::string, int>> out;
    for (const auto& s : series_)
      for (int w : worlds_)
        if (cell(s, w)) out.emplace_back(s, w);
    return out;
  }

  bool any(const std::string& path) const {
    return std::any_of(report_.runs.begin(), report_.runs.end(),
                       [&](const ReportRun& r) { return r.ok() && std::isfinite(r.number(path)); });
  }
  /// The first successful run's string at `path`, or "".
  std::string first_text(const std::string& path) const {
    for (const auto& r : report_.runs)
      if (r.ok() && r.result.summary)
        if (const Json* v = r.result.summary->at_path(path); v && v->is_string()) return v->string_or("");
    return {};
  }

 private:
  const Report& report_;
  const std::vector<ReportCell>& cells_;
  std::vector<std::string> series_;
  std::vector<int> worlds_;
};

/// A binary unit that keeps the largest value readable: (divisor, name).
std::pair<double, std::string> byte_unit(double largest) {
  const char* names[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double divisor = 1;
  int u = 0;
  while (largest >= 1024 && u < 4) {
    largest /= 1024;
    divisor *= 1024;
    ++u;
  }
  return {divisor, names[u]};
}

std::string label_of(const std::string& series, int world) { return fmt::format("{}@{}", series, world); }

svg::Series make_series(std::string name, std::string color, std::string dash, bool markers) {
  svg::Series s;
  s.name = std::move(name);
  s.color = std::move(color);
  s.dash = std::move(dash);
  s.markers = markers;
  return s;
}

/// A figure: the chart and a caption under it.
std::string figure(const std::string& kind, const std::string& svg, const std::string& caption) {
  return fmt::format("<figure id=\"chart-{}\">{}<figcaption>{}</figcaption></figure>\n", kind, svg, escape(caption));
}

/// A cell's mark on a chart: a glyph and what it means (the legend's note); kDot: none.
using Mark = std::pair<svg::Glyph, std::string>;

/// Marks of the time and speedup charts: within noise of the baseline.
Mark verdict_mark(const ReportCell& c) {
  if (c.within_noise()) return {svg::Glyph::kHollow, "within noise of the baseline: not ranked"};
  return {svg::Glyph::kDot, ""};
}

/// Marks of the efficiency chart: the efficiency flag (no efficiency above 100% goes unmarked),
/// except on the baseline, which is 100% by definition (its range is only its own noise).
Mark efficiency_mark(const ReportCell& c) {
  if (c.is_baseline) return {svg::Glyph::kDot, ""};
  if (c.efficiency_flag == "suspect") return {svg::Glyph::kSuspect, "suspect: above 100% beyond the noise"};
  if (!c.efficiency_flag.empty()) return {svg::Glyph::kHollow, c.efficiency_flag};
  return {svg::Glyph::kDot, ""};
}

/// What a chart against world size draws of a cell: an interval (point and range) in the chart's
/// unit, the text of a value for the tooltip, and its mark.
struct Measure {
  std::function<stats::Interval(const ReportCell&)> of;
  std::function<std::string(double)> text;
  std::function<Mark(const ReportCell&)> mark = [](const ReportCell&) { return Mark{svg::Glyph::kDot, ""}; };
};

/// A cell's tooltip: its value and range, runs, marks and what the comparison says of it.
std::string cell_tip(const ReportCell& c, const Measure& m, const stats::Interval& i, const Mark& mark) {
  std::string tip = fmt::format("{}: {} (min {}, max {}; {} run{})", c.name(), m.text(i.point), m.text(i.low),
                                m.text(i.high), c.ok, c.ok == 1 ? "" : "s");
  if (!mark.second.empty()) tip += "; " + mark.second;
  if (!c.within_noise_of.empty()) {
    tip += "; within noise of";
    for (std::size_t k = 0; k < c.within_noise_of.size(); ++k) tip += (k ? ", " : " ") + c.within_noise_of[k];
  }
  if (c.noisy) tip += "; its repeats spread beyond the noise threshold";
  return tip;
}

/// A line chart of `m` against world size: a line per series with error bars, dodged sideways,
/// and the legend's notes for the glyphs that appear.
svg::LineChart world_chart(const View& v, const Measure& m) {
  svg::LineChart c;
  c.log2_x = true;
  c.dodge = true;
  c.x_label = "world size (devices, log2 scale)";
  bool ranged = false;
  std::vector<Mark> used;
  for (const auto& s : v.series()) {
    svg::Series line = make_series(s, v.color(s), v.dash(s), true);
    for (int w : v.worlds()) {
      const ReportCell* cell = v.cell(s, w);
      const stats::Interval i = cell ? m.of(*cell) : stats::Interval{NAN, NAN, NAN};
      const Mark mark = cell ? m.mark(*cell) : Mark{svg::Glyph::kDot, ""};
      line.points.emplace_back(w, i.point);
      line.ranges.emplace_back(i.low, i.high);
      line.glyphs.push_back(mark.first);
      line.tips.push_back(cell ? cell_tip(*cell, m, i, mark) : std::string());
      ranged = ranged || (cell && i.high > i.low);
      if (mark.first != svg::Glyph::kDot && std::find(used.begin(), used.end(), mark) == used.end()) used.push_back(mark);
    }
    c.series.push_back(std::move(line));
  }
  if (ranged) c.notes.push_back({svg::Glyph::kWhisker, "min..max over repeats"});
  for (const auto& [glyph, text] : used) c.notes.push_back({glyph, text});
  return c;
}

std::string time_chart(const View& v, bool steady) {
  svg::LineChart step = world_chart(v, {[](const ReportCell& c) { return scaled(range(c.step_time_s), 1e3); },
                                        [](double ms) { return fmt::format("{:.3g} ms", ms); }, verdict_mark});
  step.title = steady ? "Steady-state step time vs world size" : "Step time vs world size";
  step.y_label = "step time (ms)";
  svg::LineChart train = world_chart(v, {[](const ReportCell& c) { return range(c.train_time_s); },
                                         [](double s) { return fmt::format("{:.3g} s", s); }});
  train.title = "Training loop wall time (train_time_s)";
  train.y_label = "train time (s)";
  const std::string body = svg::line_panel(step, {0, 0, kWidth, 340}) + svg::line_panel(train, {0, 350, kWidth, 300});
  return figure("time", svg::chart("time", step.title, kWidth, 650, body),
                std::string(steady ? "Top: the median step time after the warm-up steps (timing_warmup_steps)"
                                   : "Top: the median step time (some summaries have no steady-state time)") +
                    " of each strategy, the point its median over repeats and the bar min..max; speedups are computed "
                    "from it. Bottom: the wall time of the training loop, which includes the warm-up." +
                    (v.report().scaling == "weak" ? " Weak scaling: the global batch grows with the world size." : ""));
}

std::string ratio_chart(const View& v, const std::string& kind) {
  const Report& rep = v.report();
  const bool weak = rep.scaling == "weak", speedup = kind == "speedup";
  svg::LineChart c =
      speedup ? world_chart(v, {[](const ReportCell& cell) { return cell.speedup; },
                                [](double x) { return fmt::format("{:.2f}x", x); }, verdict_mark})
              : world_chart(v, {[](const ReportCell& cell) { return scaled(cell.efficiency, 100); },
                                [](double x) { return fmt::format("{:.0f}%", x); }, efficiency_mark});
  std::string caption;
  if (speedup) {
    c.title = weak ? "Speedup vs world size (weak scaling: throughput / baseline throughput)"
                   : "Speedup vs world size (strong scaling: baseline step time / step time)";
    c.y_label = "speedup";
    c.y_suffix = "x";
    svg::Series ideal = make_series(fmt::format("ideal (N / {})", rep.baseline_world_size), kIdeal, "5 4", false);
    for (int w : v.worlds()) ideal.points.emplace_back(w, static_cast<double>(w) / rep.baseline_world_size);
    c.series.push_back(std::move(ideal));
    caption = "Against the baseline: " + rep.baseline +
              ". The bar is the interval every pairing of runs allows (min/max, max/min); the dashed grey line is "
              "perfect scaling; an open circle is within noise of the baseline (their step times overlap: not ranked).";
  } else {
    c.title = weak ? "Scaling efficiency (weak scaling)" : "Scaling efficiency (strong scaling)";
    c.y_label = "efficiency (%)";
    c.y_suffix = "%";
    c.y_at_least = 110;
    const auto first = static_cast<double>(v.worlds().front()), last = static_cast<double>(v.worlds().back());
    c.series.push_back(make_series("ideal (100%)", kIdeal, "5 4", false));
    c.series.back().points = {{first, 100.0}, {last, 100.0}};
    caption = fmt::format("Efficiency = speedup / (N / {}); 100% is perfect scaling. No point above 100% is plain: an "
                          "open circle is within noise of 100% (its interval reaches down to it), a triangle is suspect, "
                          "above 100% by more than the noise (caches can do it, but so can a mismeasurement).",
                          rep.baseline_world_size);
  }
  return figure(kind, svg::chart(kind, c.title, kWidth, 340, svg::line_panel(c, {0, 0, kWidth, 340})), caption);
}

std::string throughput_chart(const View& v, bool steady) {
  svg::LineChart c = world_chart(v, {[](const ReportCell& cell) { return range(cell.samples_per_s); },
                                     [](double x) { return fmt::format("{:.4g} samples/s", x); }});
  c.title = "Throughput vs world size";
  c.y_label = "samples/s (all ranks)";
  return figure("throughput", svg::chart("throughput", c.title, kWidth, 340, svg::line_panel(c, {0, 0, kWidth, 340})),
                std::string(steady ? "Samples per second of the whole job after the warm-up steps "
                                     "(steady_samples_per_s)"
                                   : "Samples per second of the whole job (samples_per_s)") +
                    ", median over repeats with min..max.");
}

std::string peak_chart(const View& v) {
  double largest_tensors = 0, largest_peak = 0;
  for (const auto& [s, w] : v.cells()) {
    largest_tensors = std::max(largest_tensors, v.cell(s, w)->peak_tensor_bytes.max);
    largest_peak = std::max(largest_peak, v.cell(s, w)->peak_bytes.max);
  }
  const auto [tdiv, tunit] = byte_unit(largest_tensors);
  const auto [pdiv, punit] = byte_unit(largest_peak);
  const auto bytes = [](double divisor) {
    return [divisor](double x) { return detail::bytes_text(x * divisor); };
  };
  svg::LineChart tensors = world_chart(v, {[d = tdiv](const ReportCell& c) { return scaled(range(c.peak_tensor_bytes), 1 / d); },
                                           bytes(tdiv)});
  tensors.title = "Peak live tensor memory per rank vs world size";
  tensors.y_label = tunit + " per rank";
  const std::string source = v.first_text("memory.peak_source");
  svg::LineChart peak = world_chart(v, {[d = pdiv](const ReportCell& c) { return scaled(range(c.peak_bytes), 1 / d); },
                                        bytes(pdiv)});
  peak.title = source == "cuda_reserved" ? "Peak memory per rank (CUDA allocator, reserved)"
                                         : "Peak memory per rank (process peak resident set)";
  peak.y_label = punit + " per rank";
  peak.y_from_zero = true;
  const std::string body = svg::line_panel(tensors, {0, 0, kWidth, 320}) + svg::line_panel(peak, {0, 330, kWidth, 300});
  return figure("peak-memory", svg::chart("peak-memory", "Peak memory per rank vs world size", kWidth, 630, body),
                "Top: the most live tensor memory a rank had during training steps (measured: a counting allocator on "
                "the CPU, CUDA's allocator statistics on a GPU). Bottom: the peak the process or allocator reports, "
                "which includes the runtime itself. Median over repeats, bars min..max.");
}

std::string memory_chart(const View& v) {
  const auto cells = v.cells();
  double largest_state = 0, largest_tensors = 0;
  for (const auto& [s, w] : cells) {
    largest_state = std::max(largest_state, v.median_of(s, w, [](const ReportRun& r) { return r.model_state_bytes(); }));
    largest_tensors = std::max(largest_tensors, v.median_of(s, w, "memory.peak_tensor_bytes"));
  }
  // Two scales: the model state is often a small fraction of the tensor peak (activations), and
  // on one axis its parts would be a few pixels high.
  const auto [divisor, unit] = byte_unit(largest_state);
  const auto [tdivisor, tunit] = byte_unit(std::max(largest_tensors, largest_state));
  svg::BarChart state{"Model state per rank by part (held between steps)", unit, "",
                      {{"parameters", "#8da0cb"}, {"gradients", "#66c2a5"}, {"optimizer state", "#fc8d62"},
                       {"other state", "#e78ac3"}},
                      {}, {}};
  svg::BarChart tensors{"Peak live tensors per rank, and the model state in it", tunit, "", {},
                        {{"model state", "#222"}}, {}};
  for (const auto& [s, w] : cells) {
    const double params = v.median_of(s, w, "memory.model_state_bytes.params");
    const double grads = v.median_of(s, w, "memory.model_state_bytes.grads");
    const double optim = v.median_of(s, w, "memory.model_state_bytes.optimizer");
    const double peak = v.median_of(s, w, "memory.peak_tensor_bytes");
    const double total = v.median_of(s, w, [](const ReportRun& r) { return r.model_state_bytes(); });
    const double other = std::max(0.0, total - (params + grads + optim));  // a strategy's named extra state
    state.bars.push_back({label_of(s, w), v.color(s),
                          {params / divisor, grads / divisor, optim / divisor, other / divisor}, {},
                          detail::bytes_text(total),
                          fmt::format("{}: parameters {}, gradients {}, optimizer {}, other state {}", label_of(s, w),
                                      detail::bytes_text(params), detail::bytes_text(grads), detail::bytes_text(optim),
                                      detail::bytes_text(other))});
    tensors.bars.push_back({label_of(s, w), v.color(s), {peak / tdivisor}, {total / tdivisor}, detail::bytes_text(peak),
                            fmt::format("{}: peak live tensors {}, model state {}", label_of(s, w),
                                        detail::bytes_text(peak), detail::bytes_text(total))});
  }
  const std::string body = svg::bar_panel(state, {0, 0, kWidth, 320}) + svg::bar_panel(tensors, {0, 330, kWidth, 300});
  return figure("memory", svg::chart("memory", "Memory per rank by part", kWidth, 630, body),
                "Top: bytes the strategy holds between steps, by part, on their own scale (the number above a bar is "
                "their sum; the strip under a bar is its strategy's colour; hover for values). Bottom: the most live "
                "tensor memory during training steps (activations and transient buffers included), with the model "
                "state as the black mark. Medians over repeats.");
}

std::string bus_chart(const View& v) {
  double largest = 0;
  for (const auto& [s, w] : v.cells()) largest = std::max(largest, v.median_of(s, w, "comm.bus_bytes_per_step"));
  const auto [divisor, unit] = byte_unit(largest);
  svg::BarChart c{"Communication per step (bus bytes, per rank)", unit + " per step", "", {}, {}, {}};
  for (const auto& [s, w] : v.cells()) {
    const double bytes = v.median_of(s, w, "comm.bus_bytes_per_step");
    c.bars.push_back({label_of(s, w), v.color(s), {bytes / divisor}, {}, detail::bytes_text(bytes),
                      label_of(s, w) + ": " + detail::bytes_text(bytes) + " per step"});
  }
  return figure("bus", svg::chart("bus", c.title, kWidth, 320, svg::bar_panel(c, {0, 0, kWidth, 320})),
                "Bus bytes as nccl-tests count them (all-reduce 2(n-1)/n of the payload, reduce-scatter and all-gather "
                "(n-1)/n), per training step.");
}

/// The loss of a series at each logged step over all its successful runs (repeats and world
/// sizes): step -> values.
std::map<double, std::vector<double>> loss_by_step(const Report& report, const std::string& series) {
  std::map<double, std::vector<double>> out;
  for (const auto& r : report.runs) {
    if (!r.ok() || r.series != series || !r.result.summary) continue;
    const Json* curve = r.result.summary->find("loss_curve");
    if (!curve || !curve->elements()) continue;
    for (const auto& point : *curve->elements())
      if (const auto* xy = point.elements(); xy && xy->size() == 2) {
        const double x = (*xy)[0].number_or(NAN), y = (*xy)[1].number_or(NAN);
        if (std::isfinite(x) && std::isfinite(y)) out[x].push_back(y);
      }
  }
  return out;
}

/// A series' loss as its median at each step, with min..max as a band.
svg::Series loss_series(const std::string& name, const std::string& color,
                        const std::map<double, std::vector<double>>& by_step) {
  svg::Series line = make_series(name, color, "", false);
  line.band = true;
  for (const auto& [x, ys] : by_step) {
    const auto s = stats::spread(ys);
    line.points.emplace_back(x, s.median);
    line.ranges.emplace_back(s.min, s.max);
  }
  return line;
}

/// Small multiples: a panel per series on one shared scale, so that curves which coincide (every
/// strategy reproducing the baseline's training) can still be told apart; the baseline's median
/// curve is the grey dashed reference in each of the others.
std::string loss_chart(const View& v) {
  const Report& rep = v.report();
  std::vector<std::pair<std::string, std::map<double, std::vector<double>>>> curves;
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& s : v.series()) {
    auto by_step = loss_by_step(rep, s);
    if (by_step.empty()) continue;
    for (const auto& [x, ys] : by_step)
      for (double y : ys) lo = std::min(lo, y), hi = std::max(hi, y);
    curves.emplace_back(s, std::move(by_step));
  }
  const std::size_t n = curves.size();
  const std::size_t columns = n <= 1 ? 1 : n == 2 || n == 4 ? 2 : 3;
  const std::size_t rows = n == 0 ? 1 : (n + columns - 1) / columns;
  const double pw = kWidth / static_cast<double>(columns), ph = 230;
  std::string body;
  for (std::size_t i = 0; i < n; ++i) {
    const auto& [s, by_step] = curves[i];
    std::size_t runs = 0;
    for (const auto& r : rep.runs) runs += r.ok() && r.series == s;
    svg::LineChart c;
    c.title = fmt::format("{} ({} run{})", s, runs, runs == 1 ? "" : "s");
    c.x_label = "step";
    c.y_label = "loss";
    c.y_from_zero = false;
    c.y_min = lo;
    c.y_max = hi;
    c.legend = false;
    const std::string base = rep.baseline_strategy.empty()
                                 ? s
                                 : rep.baseline_strategy + (s.find(", ") == std::string::npos ? "" : s.substr(s.find(", ")));
    for (const auto& [other, other_steps] : curves)
      if (other == base && other != s) {
        svg::Series ref = loss_series("baseline " + other, kIdeal, other_steps);
        ref.band = false;
        ref.ranges.clear();
        ref.dash = "4 3";
        c.series.push_back(std::move(ref));
      }
    c.series.push_back(loss_series(s, v.color(s), by_step));
    const double x = pw * static_cast<double>(i % columns), y = ph * static_cast<double>(i / columns);
    body += svg::line_panel(c, {x, y, pw, ph});
  }
  if (n == 0) {
    svg::LineChart empty;
    empty.title = "Training loss";
    body = svg::line_panel(empty, {0, 0, kWidth, ph});
  }
  const double height = ph * static_cast<double>(rows);
  return figure("loss", svg::chart("loss", "Training loss per strategy", kWidth, height, body),
                "A panel per strategy on one scale: the line is the median loss over its runs (every repeat and "
                "world size) at each logged step, the shaded band min..max; the grey dashed line is the baseline's "
                "median. Strategies that reproduce the baseline's training follow it.");
}

std::string breakdown_chart(const View& v) {
  svg::BarChart c{"Where a step's time goes (rank 0)", "ms per step", "",
                  {{"data", "#a6cee3"}, {"compute", "#1f78b4"}, {"comm wait", "#e31a1c"}, {"optimizer", "#ff7f00"}},
                  {}, {}};
  for (const auto& [s, w] : v.cells()) {
    if (!std::isfinite(v.median_of(s, w, "time_breakdown_s.compute"))) continue;
    std::vector<double> parts;
    std::string tip = label_of(s, w) + ":";
    for (const char* part : {"data", "compute", "comm_wait", "optimizer"}) {
      parts.push_back(1e3 * v.median_of(s, w, std::string("time_breakdown_s.") + part));
      tip += fmt::format(" {} {:.3g} ms", part, parts.back());
    }
    double total = 0;
    for (double p : parts) total += std::isfinite(p) ? p : 0;
    c.bars.push_back({label_of(s, w), v.color(s), parts, {}, fmt::format("{:.3g} ms", total), tip});
  }
  return figure("breakdown", svg::chart("breakdown", c.title, kWidth, 340, svg::bar_panel(c, {0, 0, kWidth, 340})),
                "time_breakdown_s per step (medians over repeats): fetching data, forward and backward, exposed "
                "communication (time blocked in collectives) and the optimizer step.");
}

std::string flops_chart(const View& v) {
  const bool mfu = v.any("flops.mfu");
  // A unit in which the fastest run reads 1 or more (CPU runs of small models are at MFLOP/s).
  double largest = 0;
  for (const auto& [s, w] : v.cells()) largest = std::max(largest, v.median_of(s, w, "flops.achieved_tflops_per_device"));
  const auto [scale, unit] = largest >= 1 || largest <= 0 ? std::pair{1.0, "TFLOP/s"}
                             : largest >= 1e-3            ? std::pair{1e3, "GFLOP/s"}
                                                          : std::pair{1e6, "MFLOP/s"};
  svg::BarChart rate{fmt::format("Achieved {} per device", unit), unit, "", {}, {}, {}, true};
  svg::BarChart util{"Model FLOPs utilization (MFU)", "MFU (%)", "%", {}, {}, {}, true};
  for (const auto& [s, w] : v.cells()) {
    const double t = v.median_of(s, w, "flops.achieved_tflops_per_device");
    if (!std::isfinite(t)) continue;
    rate.bars.push_back({label_of(s, w), v.color(s), {t * scale}, {}, fmt::format("{:.3g}", t * scale),
                         fmt::format("{}: {:.4g} TFLOP/s per device", label_of(s, w), t)});
    const double m = 100 * v.median_of(s, w, "flops.mfu");
    util.bars.push_back({label_of(s, w), v.color(s), {m}, {}, detail::number_text(m, "{:.1f}%"),
                         label_of(s, w) + ": MFU " + detail::number_text(m, "{:.2f}%")});
  }
  std::string body = svg::bar_panel(rate, {0, 0, kWidth, 300});
  if (mfu) body += svg::bar_panel(util, {0, 310, kWidth, 280});
  std::string caption = "Model FLOPs per sample x samples/s / devices";
  if (const auto formula = v.first_text("flops.formula"); !formula.empty()) caption += "; FLOPs per sample: " + formula;
  if (const auto source = v.first_text("flops.peak_source"); mfu && !source.empty())
    caption += "; MFU against the peak from " + source;
  if (!mfu) caption += "; no MFU: no peak is known for this device";
  return figure("flops", svg::chart("flops", "Throughput in FLOPs", kWidth, mfu ? 590 : 300, body), caption + ".");
}

}  // namespace

std::string strategy_color(const std::string& strategy) {
  // The built-in strategies (Tableau 10, its yellow darkened to read on white), then a hash of any
  // other name into colours apart from them.
  static const std::map<std::string, const char*> fixed{
      {"single", "#4e79a7"}, {"dp", "#f28e2b"},    {"ddp", "#e15759"},   {"fsdp", "#76b7b2"},
      {"zero1", "#59a14f"},  {"zero2", "#c9a100"}, {"zero3", "#b07aa1"}, {"local_sgd", "#ff9da7"}};
  constexpr const char* kOthers[] = {"#9c755f", "#17becf", "#2f4b7c", "#d45087",
                                     "#665191", "#7f7f7f", "#bcbd22", "#637939"};
  if (const auto it = fixed.find(strategy); it != fixed.end()) return it->second;
  std::uint32_t hash = 2166136261u;  // FNV-1a: the same name gets the same colour in every report
  for (unsigned char c : strategy) hash = (hash ^ c) * 16777619u;
  return kOthers[hash % std::size(kOthers)];
}

namespace detail {

std::string report_charts(const Report& report, const std::vector<ReportCell>& cells) {
  const View v(report, cells);
  const bool steady = std::all_of(cells.begin(), cells.end(), [](const ReportCell& c) { return c.ok == 0 || c.steady; });
  std::string out = time_chart(v, steady) + ratio_chart(v, "speedup") + ratio_chart(v, "efficiency") +
                    throughput_chart(v, steady) + peak_chart(v) + memory_chart(v) + bus_chart(v) + loss_chart(v);
  if (v.any("time_breakdown_s.compute")) out += breakdown_chart(v);
  if (v.any("flops.achieved_tflops_per_device")) out += flops_chart(v);
  return out;
}

}  // namespace detail

}  // namespace strata
