// The tables of a comparison, shared by results.md (as Markdown) and report.html (as HTML), so
// that both always show the same figures.

#include <algorithm>
#include <cmath>
#include <functional>

#include <fmt/format.h>

#include "compare/report.hpp"
#include "train/median.hpp"

namespace strata {

namespace detail {

std::string bytes_text(double bytes) {
  if (!std::isfinite(bytes)) return "-";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::abs(bytes) >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.{}f} {}", bytes, bytes < 10 ? 2 : 1, units[u]);
}

std::string number_text(double v, const char* format) {
  return std::isfinite(v) ? fmt::format(fmt::runtime(format), v) : std::string("-");
}

}  // namespace detail

double ReportRun::model_state_bytes() const {
  return number("memory.model_state_bytes.params") + number("memory.model_state_bytes.grads") +
         number("memory.model_state_bytes.optimizer");
}

std::vector<std::string> resumed_notes(const std::vector<ReportRun>& runs) {
  std::vector<std::string> notes;
  for (const auto& r : runs) {
    if (!r.result.resumed()) continue;
    const auto& segments = r.result.segments;
    std::string earlier;
    for (std::size_t i = 0; i + 1 < segments.size(); ++i) earlier += (i ? ", " : "") + segments[i].text();
    notes.push_back(fmt::format("{} was resumed ({} segments): its figures are its last segment's, {}, {:g} steps; "
                                "before it: {}",
                                r.label, segments.size(), segments.back().text(), segments.back().steps, earlier));
  }
  return notes;
}

namespace {

struct Column {
  const char* title;
  std::function<double(const ReportRun&)> measure;
  std::function<std::string(double)> text;
};

/// Whether some successful run has a number at `path`.
bool any_number(const std::vector<ReportRun>& runs, const std::string& path) {
  return std::any_of(runs.begin(), runs.end(),
                     [&](const ReportRun& r) { return r.ok() && std::isfinite(r.number(path)); });
}

}  // namespace

std::vector<ReportTable> report_tables(const std::vector<ReportRun>& runs) {
  // World sizes in order, and the table rows (series) in order of appearance.
  std::vector<int> worlds;
  std::vector<std::string> keys;
  for (const auto& r : runs) {
    if (std::find(worlds.begin(), worlds.end(), r.world_size) == worlds.end()) worlds.push_back(r.world_size);
    if (std::find(keys.begin(), keys.end(), r.series) == keys.end()) keys.push_back(r.series);
  }
  std::sort(worlds.begin(), worlds.end());
  // The median over repeats of a measure, or a status word when no repeat succeeded.
  const auto cell = [&](const std::string& key, int world, const Column& col) -> std::string {
    std::vector<double> values;
    std::string status;
    for (const auto& r : runs) {
      if (r.series != key || r.world_size != world) continue;
      if (r.ok()) values.push_back(col.measure(r));
      else status = r.result.status;
    }
    if (values.empty()) return status.empty() ? "n/a" : status;
    return col.text(median(values));
  };
  std::vector<ReportTable> tables;
  const auto table = [&](const std::string& title, const std::vector<Column>& columns) {
    ReportTable t{title, {}, {}};
    std::vector<std::string> header{"strategy"};
    for (int w : worlds)
      for (const auto& col : columns) header.push_back(fmt::format("{} @{}", col.title, w));
    t.align.assign(header.size(), 'r');
    t.align.front() = 'l';
    t.grid.push_back(std::move(header));
    for (const auto& key : keys) {
      std::vector<std::string> line{key};
      for (int w : worlds)
        for (const auto& col : columns) line.push_back(cell(key, w, col));
      t.grid.push_back(std::move(line));
    }
    tables.push_back(std::move(t));
  };
  const auto number = [](const char* path) { return [path](const ReportRun& r) { return r.number(path); }; };
  const auto fixed = [](const char* format) { return [format](double v) { return detail::number_text(v, format); }; };
  const auto percent = [](double v) { return detail::number_text(100 * v, "{:.0f}%"); };

  table("Time", {{"time s", number("train_time_s"), fixed("{:.2f}")},
                 {"speedup", [](const ReportRun& r) { return r.speedup.value_or(NAN); }, fixed("{:.2f}")},
                 {"eff.", [](const ReportRun& r) { return r.efficiency.value_or(NAN); }, percent}});
  table("Memory and communication per rank",
        {{"state", [](const ReportRun& r) { return r.model_state_bytes(); }, detail::bytes_text},
         {"tensor peak", number("memory.peak_tensor_bytes"), detail::bytes_text},
         {"peak", number("memory.peak_bytes"), detail::bytes_text},
         {"bus/step", number("comm.bus_bytes_per_step"), detail::bytes_text}});
  table("Result", {{"loss", number("final_loss"), fixed("{:.4f}")}, {"acc.", number("eval.accuracy"), fixed("{:.4f}")}});
  // Figures that only newer summaries carry: shown when some run has them.
  if (any_number(runs, "time_breakdown_s.compute")) {
    const auto ms = [](double v) { return detail::number_text(1e3 * v, "{:.2f}"); };
    table("Step time breakdown (ms per step)", {{"data", number("time_breakdown_s.data"), ms},
                                                {"compute", number("time_breakdown_s.compute"), ms},
                                                {"comm wait", number("time_breakdown_s.comm_wait"), ms},
                                                {"optim.", number("time_breakdown_s.optimizer"), ms}});
  }
  if (any_number(runs, "flops.achieved_tflops_per_device")) {
    std::vector<Column> columns{{"TFLOP/s", number("flops.achieved_tflops_per_device"), fixed("{:.3g}")}};
    const auto mfu = [](double v) { return detail::number_text(100 * v, "{:.1f}%"); };
    if (any_number(runs, "flops.mfu")) columns.push_back({"MFU", number("flops.mfu"), mfu});
    table("Throughput per device", columns);
  }
  return tables;
}

}  // namespace strata
