// report.html: the charts and tables of a set of runs as one static page. Colours follow the
// series (strategy) in order of appearance and stay the same in every chart; within a series,
// line dashes tell world sizes apart in the loss curves.

#include "compare/report.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <thread>

#include <fmt/format.h>

#include "bench/peaks.hpp"
#include "compare/svg.hpp"
#include "train/median.hpp"

namespace strata {

namespace {

using svg::escape;

constexpr double kWidth = 900;  // every chart's width, in px at 100% zoom
// Tableau 10: distinct in hue and readable on white.
constexpr const char* kPalette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                    "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
constexpr const char* kDashes[] = {"", "7 4", "2 3", "10 3 2 3", "4 2 4 6"};
constexpr const char* kIdeal = "#777";

/// What the charts need of the runs: series in order, world sizes, medians over repeats.
class View {
 public:
  explicit View(const Report& report) : report_(report) {
    for (const auto& r : report.runs) {
      if (std::find(series_.begin(), series_.end(), r.series) == series_.end()) series_.push_back(r.series);
      if (std::find(worlds_.begin(), worlds_.end(), r.world_size) == worlds_.end()) worlds_.push_back(r.world_size);
    }
    std::sort(worlds_.begin(), worlds_.end());
  }

  const std::vector<std::string>& series() const { return series_; }
  const std::vector<int>& worlds() const { return worlds_; }
  const Report& report() const { return report_; }

  std::string color(const std::string& series) const {
    const auto i = static_cast<std::size_t>(std::find(series_.begin(), series_.end(), series) - series_.begin());
    return kPalette[i % std::size(kPalette)];
  }
  std::string dash(int world) const {
    const auto i = static_cast<std::size_t>(std::find(worlds_.begin(), worlds_.end(), world) - worlds_.begin());
    return kDashes[i % std::size(kDashes)];
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
        if (std::any_of(report_.runs.begin(), report_.runs.end(),
                        [&](const ReportRun& r) { return r.ok() && r.series == s && r.world_size == w; }))
          out.emplace_back(s, w);
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

/// A figure: the chart and a caption under it.
std::string figure(const std::string& kind, const std::string& svg, const std::string& caption) {
  return fmt::format("<figure id=\"chart-{}\">{}<figcaption>{}</figcaption></figure>\n", kind, svg, escape(caption));
}

/// Time, speedup or efficiency against world size: a line per series.
std::string scaling_chart(const View& v, const std::string& kind) {
  const Report& rep = v.report();
  const bool weak = rep.scaling == "weak";
  svg::LineChart c;
  c.log2_x = true;
  c.x_label = "world size (devices, log2 scale)";
  for (const auto& s : v.series()) {
    svg::Series line{s, v.color(s), "", {}, true};
    for (int w : v.worlds()) {
      double y = NAN;
      if (kind == "time") y = v.median_of(s, w, "train_time_s");
      else if (kind == "speedup") y = v.median_of(s, w, [](const ReportRun& r) { return r.speedup.value_or(NAN); });
      else y = 100 * v.median_of(s, w, [](const ReportRun& r) { return r.efficiency.value_or(NAN); });
      line.points.emplace_back(w, y);
    }
    c.series.push_back(std::move(line));
  }
  std::string caption;
  if (kind == "time") {
    c.title = "Training time vs world size";
    c.y_label = "train time (s)";
    caption = "train_time_s of each strategy (median over repeats)" +
              std::string(weak ? "; weak scaling: the global batch grows with the world size." : ".");
  } else if (kind == "speedup") {
    c.title = weak ? "Speedup vs world size (weak scaling: throughput / baseline throughput)"
                   : "Speedup vs world size (strong scaling: baseline time / time)";
    c.y_label = "speedup";
    c.y_suffix = "x";
    svg::Series ideal{fmt::format("ideal (N / {})", rep.baseline_world_size), kIdeal, "5 4", {}, false};
    for (int w : v.worlds()) ideal.points.emplace_back(w, static_cast<double>(w) / rep.baseline_world_size);
    c.series.push_back(std::move(ideal));
    caption = "Against the baseline: " + rep.baseline + ". The dashed grey line is perfect scaling.";
  } else {
    c.title = weak ? "Scaling efficiency (weak scaling)" : "Scaling efficiency (strong scaling)";
    c.y_label = "efficiency (%)";
    c.y_suffix = "%";
    c.y_at_least = 110;
    const auto first = static_cast<double>(v.worlds().front()), last = static_cast<double>(v.worlds().back());
    c.series.push_back({"ideal (100%)", kIdeal, "5 4", {{first, 100.0}, {last, 100.0}}, false});
    caption = fmt::format("Efficiency = speedup / (N / {}); 100% is perfect scaling.", rep.baseline_world_size);
  }
  return figure(kind, svg::chart(kind, c.title, kWidth, 340, svg::line_panel(c, {0, 0, kWidth, 340})), caption);
}

std::string memory_chart(const View& v) {
  const auto cells = v.cells();
  double largest = 0, largest_peak = 0;
  for (const auto& [s, w] : cells) {
    largest = std::max({largest, v.median_of(s, w, [](const ReportRun& r) { return r.model_state_bytes(); }),
                        v.median_of(s, w, "memory.peak_tensor_bytes")});
    largest_peak = std::max(largest_peak, v.median_of(s, w, "memory.peak_bytes"));
  }
  const auto [divisor, unit] = byte_unit(largest);
  const auto [peak_divisor, peak_unit] = byte_unit(largest_peak);
  svg::BarChart state{"Model state per rank, and the measured peak of live tensors", unit, "",
                      {{"parameters", "#8da0cb"}, {"gradients", "#66c2a5"}, {"optimizer state", "#fc8d62"}},
                      {{"peak tensor bytes", "#222"}}, {}};
  const std::string source = v.first_text("memory.peak_source");
  svg::BarChart peak{source == "cuda_reserved" ? "Peak memory per rank (CUDA allocator, reserved)"
                                               : "Peak memory per rank (process peak resident set)",
                     peak_unit, "", {}, {}, {}, true};
  for (const auto& [s, w] : cells) {
    const double params = v.median_of(s, w, "memory.model_state_bytes.params");
    const double grads = v.median_of(s, w, "memory.model_state_bytes.grads");
    const double optim = v.median_of(s, w, "memory.model_state_bytes.optimizer");
    const double tensors = v.median_of(s, w, "memory.peak_tensor_bytes");
    const double bytes = v.median_of(s, w, "memory.peak_bytes");
    state.bars.push_back({label_of(s, w), v.color(s), {params / divisor, grads / divisor, optim / divisor},
                          {tensors / divisor}, detail::bytes_text(params + grads + optim),
                          fmt::format("{}: parameters {}, gradients {}, optimizer {}, peak tensors {}", label_of(s, w),
                                      detail::bytes_text(params), detail::bytes_text(grads), detail::bytes_text(optim),
                                      detail::bytes_text(tensors))});
    peak.bars.push_back({label_of(s, w), v.color(s), {bytes / peak_divisor}, {}, detail::bytes_text(bytes),
                         label_of(s, w) + ": peak " + detail::bytes_text(bytes)});
  }
  const std::string body = svg::bar_panel(state, {0, 0, kWidth, 330}) + svg::bar_panel(peak, {0, 340, kWidth, 280});
  return figure("memory", svg::chart("memory", "Memory per rank by part", kWidth, 620, body),
                "Top: bytes held between steps by part (the number above a bar, where there is room, is their sum; the "
                "strip under a bar is its strategy's colour; hover for values), and the black mark the most live "
                "tensor memory during training steps. Bottom: the peak the process or allocator reports, which includes the runtime itself.");
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

std::string loss_chart(const View& v) {
  svg::LineChart c;
  c.title = "Training loss";
  c.x_label = "step";
  c.y_label = "loss";
  c.y_from_zero = false;
  std::vector<std::string> names;
  for (const auto& r : v.report().runs) {
    if (!r.ok() || !r.result.summary) continue;
    const Json* curve = r.result.summary->find("loss_curve");
    if (!curve || !curve->elements()) continue;
    std::string name = label_of(r.series, r.world_size);
    const auto same = std::count(names.begin(), names.end(), name);
    names.push_back(name);
    if (same > 0) name += fmt::format(" #{}", same + 1);
    svg::Series line{name, v.color(r.series), v.dash(r.world_size), {}, false};
    for (const auto& point : *curve->elements())
      if (const auto* xy = point.elements(); xy && xy->size() == 2)
        line.points.emplace_back((*xy)[0].number_or(NAN), (*xy)[1].number_or(NAN));
    c.series.push_back(std::move(line));
  }
  // Room for a legend line per run, up to a point (the legend then ends with "... n more").
  const double height = std::clamp(110 + 18 * static_cast<double>(c.series.size()), 380.0, 760.0);
  return figure("loss", svg::chart("loss", c.title, kWidth, height, svg::line_panel(c, {0, 0, kWidth, height})),
                "Every successful run's loss at its logged steps; colour: strategy, dash: world size. Strategies that "
                "reproduce the baseline's training lie on top of each other.");
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
                "time_breakdown_s per step: fetching data, forward and backward, exposed communication (time blocked "
                "in collectives) and the optimizer step.");
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

std::string html_table(const ReportTable& t) {
  std::string out = "<table>\n<thead><tr>";
  for (std::size_t c = 0; c < t.grid.front().size(); ++c)
    out += fmt::format("<th class=\"{}\">{}</th>", c < t.align.size() ? t.align[c] : 'l', escape(t.grid.front()[c]));
  out += "</tr></thead>\n<tbody>\n";
  for (std::size_t l = 1; l < t.grid.size(); ++l) {
    out += "<tr>";
    for (std::size_t c = 0; c < t.grid[l].size(); ++c)
      out += fmt::format("<td class=\"{}\">{}</td>", c < t.align.size() ? t.align[c] : 'l', escape(t.grid[l][c]));
    out += "</tr>\n";
  }
  return out + "</tbody>\n</table>\n";
}

/// The distinct values of a summary string at `path` over the runs, joined.
std::string distinct(const Report& report, const std::function<std::string(const ReportRun&)>& f) {
  std::vector<std::string> seen;
  for (const auto& r : report.runs)
    if (const auto s = f(r); !s.empty() && std::find(seen.begin(), seen.end(), s) == seen.end()) seen.push_back(s);
  std::string out;
  for (const auto& s : seen) out += (out.empty() ? "" : ", ") + s;
  return out.empty() ? "-" : out;
}

std::string summary_text(const ReportRun& r, const std::string& path) {
  if (!r.result.summary) return {};
  const Json* v = r.result.summary->at_path(path);
  if (!v) return {};
  if (v->is_number()) return fmt::format("{:g}", v->number_or(NAN));
  return v->string_or("");
}

std::string runs_table(const Report& report) {
  ReportTable t{"Runs", {{"run", "strategy", "world size", "status", "segments", "model", "dataset", "steps",
                          "global batch", "device", "directory", "cause"}}, "llrlrlllrrlll"};
  for (const auto& r : report.runs) {
    // A resumed run is marked: its figures are its last segment's (the notes name the others).
    const auto& segments = r.result.segments;
    const std::string marked = segments.empty()  ? std::string()
                               : r.result.resumed() ? fmt::format("{} (resumed)", segments.size())
                                                    : std::string("1");
    t.grid.push_back({r.label, r.series, std::to_string(r.world_size), r.result.status, marked,
                      summary_text(r, "model"), summary_text(r, "dataset"), summary_text(r, "steps"),
                      summary_text(r, "global_batch_size"), summary_text(r, "device"), r.dir,
                      r.ok() ? std::string() : r.result.error});
  }
  return html_table(t);
}

constexpr const char* kCss = R"(
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #222; background: #fafafa;
       margin: 0; }
main { max-width: 960px; margin: 0 auto; padding: 24px; }
h1 { font-size: 24px; margin: 0 0 12px; }
h2 { font-size: 19px; margin: 32px 0 10px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
h3 { font-size: 15px; margin: 20px 0 6px; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 3px 16px; margin: 0; font-size: 14px; }
dl.facts dt { color: #666; }
dl.facts dd { margin: 0; }
figure { background: #fff; border: 1px solid #ddd; border-radius: 4px; margin: 16px 0; padding: 8px; }
figcaption { font-size: 13px; color: #555; margin: 6px 4px 2px; }
svg.chart { display: block; max-width: 100%; height: auto; }
table { border-collapse: collapse; font-size: 13px; background: #fff; margin: 4px 0 12px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; white-space: nowrap; }
th { background: #f0f0f0; font-weight: 600; }
td.r, th.r { text-align: right; font-variant-numeric: tabular-nums; }
td.l, th.l { text-align: left; }
tbody tr:nth-child(even) { background: #f8f8f8; }
.scroll { overflow-x: auto; }
nav a { margin-right: 12px; font-size: 14px; }
footer { color: #888; font-size: 12px; margin-top: 32px; }
)";

}  // namespace

std::string machine_description() {
  return fmt::format("{}, {} cores", cpu_model(), std::thread::hardware_concurrency());
}

std::string render_report(const Report& report) {
  const View v(report);
  const bool any_ok = std::any_of(report.runs.begin(), report.runs.end(), [](const ReportRun& r) { return r.ok(); });
  std::string out = fmt::format("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                                "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
                                "<title>{}</title>\n<style>{}</style>\n</head>\n<body>\n<main>\n<h1>{}</h1>\n",
                                escape(report.title), kCss, escape(report.title));
  std::vector<std::pair<std::string, std::string>> facts{
      {"date", report.date},
      {"machine", report.machine},
      {"software", fmt::format("strata {}, LibTorch {}", STRATA_VERSION, STRATA_TORCH_VERSION)},
      {"device", distinct(report, [](const ReportRun& r) {
         const auto d = summary_text(r, "device"), b = summary_text(r, "backend");
         return d.empty() || b.empty() || b == "none" ? d : d + " (" + b + ")";
       })},
      {"model", distinct(report, [](const ReportRun& r) { return summary_text(r, "model"); })},
      {"dataset", distinct(report, [](const ReportRun& r) { return summary_text(r, "dataset"); })},
      {"scaling", report.scaling == "weak"
                      ? "weak: the per-rank batch is fixed; speedup = throughput / baseline throughput"
                      : "strong: the same global work; speedup = baseline train time / train time"},
      {"baseline", report.baseline}};
  out += "<dl class=\"facts\">\n";
  for (const auto& [k, text] : facts) out += fmt::format("<dt>{}</dt><dd>{}</dd>\n", escape(k), escape(text));
  for (const auto& f : report.facts) {
    const auto colon = f.find(": ");
    out += colon == std::string::npos ? fmt::format("<dt></dt><dd>{}</dd>\n", escape(f))
                                      : fmt::format("<dt>{}</dt><dd>{}</dd>\n", escape(f.substr(0, colon)),
                                                    escape(f.substr(colon + 2)));
  }
  out += "</dl>\n<nav><a href=\"#charts\">charts</a><a href=\"#tables\">tables</a><a href=\"#runs\">runs</a>" +
         std::string(report.notes.empty() ? "" : "<a href=\"#notes\">notes</a>") + "</nav>\n";

  out += "<section id=\"charts\">\n<h2>Charts</h2>\n";
  if (!any_ok) out += "<p>No run succeeded: there is nothing to chart.</p>\n";
  else {
    for (const char* kind : {"time", "speedup", "efficiency"}) out += scaling_chart(v, kind);
    out += memory_chart(v) + bus_chart(v) + loss_chart(v);
    if (v.any("time_breakdown_s.compute")) out += breakdown_chart(v);
    if (v.any("flops.achieved_tflops_per_device")) out += flops_chart(v);
  }
  out += "</section>\n<section id=\"tables\">\n<h2>Tables</h2>\n<p>@N: world size N (ranks, or dp's replicas in one "
         "process); medians over repeats.</p>\n";
  for (const auto& t : report_tables(report.runs))
    out += fmt::format("<h3>{}</h3>\n<div class=\"scroll\">{}</div>\n", escape(t.title), html_table(t));
  out += "</section>\n<section id=\"runs\">\n<h2>Runs</h2>\n<div class=\"scroll\">" + runs_table(report) +
         "</div>\n</section>\n";
  if (!report.notes.empty()) {
    out += "<section id=\"notes\">\n<h2>Notes</h2>\n<ul>\n";
    for (const auto& n : report.notes) out += "<li>" + escape(n) + "</li>\n";
    out += "</ul>\n</section>\n";
  }
  return out + fmt::format("<footer>Made by strata {} on {}.</footer>\n</main>\n</body>\n</html>\n", STRATA_VERSION,
                           escape(report.date));
}

}  // namespace strata
