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
  double total = number("memory.model_state_bytes.params") + number("memory.model_state_bytes.grads") +
                 number("memory.model_state_bytes.optimizer");
  // And the state a strategy keeps besides, by name (an outer optimizer's momentum, error feedback).
  const Json* memory = result.summary ? result.summary->find("memory") : nullptr;
  const Json* state = memory != nullptr ? memory->find("model_state_bytes") : nullptr;
  if (state != nullptr && state->members() != nullptr)
    for (const auto& [name, bytes] : *state->members())
      if (name != "params" && name != "grads" && name != "optimizer" && bytes.is_number()) total += bytes.number_or(0);
  return total;
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

/// `value` with a range when the repeats differ: "4.08 (3.95–4.31)".
std::string with_range(const std::string& value, const stats::Spread& s, const std::function<std::string(double)>& text,
                       double low, double high) {
  const std::string lo = text(low), hi = text(high);
  if (s.n < 2 || !(high > low) || lo == hi) return value;  // one run, or a range below the shown digits
  return fmt::format("{} ({}–{})", value, lo, hi);
}

}  // namespace

std::vector<ReportTable> report_tables(const Report& report) {
  const auto& runs = report.runs;
  const auto cells = report_cells(report);
  // World sizes in order, and the table rows (series) in order of appearance.
  std::vector<int> worlds;
  std::vector<std::string> keys;
  for (const auto& r : runs) {
    if (std::find(worlds.begin(), worlds.end(), r.world_size) == worlds.end()) worlds.push_back(r.world_size);
    if (std::find(keys.begin(), keys.end(), r.series) == keys.end()) keys.push_back(r.series);
  }
  std::sort(worlds.begin(), worlds.end());
  // The status word of a (series, world) without a successful run.
  const auto status_of = [&](const std::string& key, int world) {
    std::string status;
    for (const auto& r : runs)
      if (r.series == key && r.world_size == world && !r.ok()) status = r.result.status;
    return status.empty() ? std::string("n/a") : status;
  };
  // The median over repeats of a measure, or the status word when no repeat succeeded.
  const auto cell = [&](const std::string& key, int world, const Column& col) -> std::string {
    std::vector<double> values;
    for (const auto& r : runs)
      if (r.series == key && r.world_size == world && r.ok()) values.push_back(col.measure(r));
    return values.empty() ? status_of(key, world) : col.text(median(values));
  };
  std::vector<ReportTable> tables;
  const auto table = [&](const std::string& title, const std::vector<Column>& columns) {
    ReportTable t{title, {}, {}, {}};
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

  // Time, from the cells: spreads over repeats and intervals against the baseline.
  {
    ReportTable t{"Time", {{"strategy"}}, "l", {}};
    for (int w : worlds)
      for (const char* title : {"step ms", "speedup", "eff.", "time s"}) {
        t.grid.front().push_back(fmt::format("{} @{}", title, w));
        t.align += 'r';
      }
    // Milliseconds to 3 significant digits, whole above 100 (no exponents).
    const auto ms = [](double v) { return detail::number_text(1e3 * v, 1e3 * v >= 100 ? "{:.0f}" : "{:#.3g}"); };
    const auto two = fixed("{:.2f}");
    const auto seconds = [](double v) { return detail::number_text(v, v >= 100 ? "{:.0f}" : "{:#.3g}"); };
    const auto pct = [](double v) { return detail::number_text(100 * v, "{:.0f}"); };
    bool steady = true, marks = false;
    for (const auto& key : keys) {
      std::vector<std::string> line{key};
      for (int w : worlds) {
        const auto c = std::find_if(cells.begin(), cells.end(),
                                    [&](const ReportCell& x) { return x.series == key && x.world_size == w; });
        if (c == cells.end() || c->ok == 0) {
          line.insert(line.end(), 4, c == cells.end() ? std::string("n/a") : status_of(key, w));
          continue;
        }
        steady = steady && c->steady;
        // ≈ can't be told from its reference (speedup: the baseline; efficiency: 100%); ! suspect.
        const std::string noise = c->within_noise() ? " ≈" : "";
        const std::string flag = c->is_baseline || c->efficiency_flag.empty() ? ""
                                 : c->efficiency_flag == "suspect"            ? " !"
                                                                              : " ≈";
        marks = marks || !noise.empty() || !flag.empty();
        const auto& time = c->step_time_s;
        const auto& sp = c->speedup;
        const auto& ef = c->efficiency;
        line.push_back(with_range(ms(time.median), time, ms, time.min, time.max));
        line.push_back(with_range(two(sp.point) + noise, time, two, sp.low, sp.high));
        line.push_back(with_range(pct(ef.point) + "%" + flag, time, pct, ef.low, ef.high));
        line.push_back(with_range(seconds(c->train_time_s.median), c->train_time_s, seconds, c->train_time_s.min,
                                  c->train_time_s.max));
      }
      t.grid.push_back(std::move(line));
    }
    t.note = std::string(steady ? "step ms: steady-state step time (after the warm-up steps)"
                                : "step ms: median step time (some summaries have no steady-state time)") +
             ", median over repeats, (min–max) when they differ; speedup and efficiency from it, with the interval "
             "of every pairing of runs; time s: train_time_s, the training loop's wall time" +
             (marks ? ". ≈: within noise (a speedup of the baseline's time: the ranges overlap, not ranked; an "
                      "efficiency of 100%); !: suspect, an efficiency above 100% beyond the noise"
                    : "") +
             ".";
    tables.push_back(std::move(t));
  }
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
