// `strata plot RUN_DIR...`: report.html from run directories made separately (by `strata run`,
// on this machine or another). Runs of one strategy and world size are its repeats; speedups are
// computed as `strata compare` computes them under strong scaling (aggregate_report: steady-state
// step times against the baseline's, with the intervals their runs allow, and the noise), and a
// strategy has the colour it has in every report.

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "compare/aggregate.hpp"
#include "compare/report.hpp"
#include "io/run_dir.hpp"
#include "strata/errors.hpp"
#include "train/median.hpp"

namespace strata {

namespace fs = std::filesystem;

namespace {

/// The directory's own name, also for "." or a trailing slash.
std::string name_of(const fs::path& dir) {
  const fs::path full = fs::weakly_canonical(fs::absolute(dir));
  return full.filename().empty() ? full.string() : full.filename().string();
}

/// The run of `dir`; UsageError when it is not a finished run directory.
ReportRun read_run(const fs::path& dir) {
  const std::string fix = "Pass directories written by `strata run` (each holds summary.json), e.g. "
                          "`strata plot runs/a runs/b`.";
  if (!fs::is_directory(dir))
    throw UsageError(fmt::format("run directory {} {}.", dir.string(), fs::exists(dir) ? "is not a directory" : "does not exist"),
                     fix);
  if (!fs::exists(dir / "summary.json")) {
    if (fs::exists(dir / "results.json"))
      throw UsageError(dir.string() + " is a comparison, not a run: it has no summary.json.",
                       "Its report.html is in it already; to plot some of its runs, pass their directories (" +
                           (dir / "<run>").string() + ").");
    throw UsageError(dir.string() + " has no summary.json: it is not a run directory, or its run has not finished.",
                     fix + " A run writes summary.json when it ends.");
  }
  ReportRun run;
  run.result = read_run_result(dir);
  if (!run.result.summary)
    throw UsageError("cannot read " + (dir / "summary.json").string() + ": " + run.result.error,
                     "Rerun that experiment with `strata run`, or leave the directory out.");
  const Json& s = *run.result.summary;
  const Json* strategy = s.find("strategy");
  if (!strategy || !strategy->is_string())
    throw UsageError((dir / "summary.json").string() + " names no strategy.",
                     "Pass run directories written by `strata run`; other summary.json files are not runs.");
  run.series = strategy->string_or("");
  const double devices = run.number("devices"), world = run.number("world_size");
  run.world_size = static_cast<int>(std::isfinite(devices) ? devices : std::isfinite(world) ? world : 1);
  run.label = name_of(dir);
  run.dir = dir.string();
  return run;
}

/// The baseline: the run `request.baseline` names (added when it is not among the runs), else
/// the first successful `single` run, else the successful run with the smallest world size.
std::optional<std::size_t> choose_baseline(const PlotRequest& request, std::vector<ReportRun>& runs,
                                           std::vector<std::string>& notes) {
  if (!request.baseline.empty()) {
    ReportRun base = read_run(request.baseline);
    if (!base.ok())
      throw UsageError(fmt::format("the baseline {} did not finish successfully (status {}).",
                                   request.baseline.string(), base.result.status),
                       "Choose a successful run as --baseline, or leave it out (the smallest world size is used).");
    const fs::path wanted = fs::weakly_canonical(fs::absolute(request.baseline));
    for (std::size_t i = 0; i < runs.size(); ++i)
      if (fs::weakly_canonical(fs::absolute(runs[i].dir)) == wanted) return i;
    notes.push_back("the baseline " + request.baseline.string() + " is not among the runs given; it was added");
    runs.push_back(std::move(base));
    return runs.size() - 1;
  }
  std::optional<std::size_t> best;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    if (!runs[i].ok()) continue;
    if (runs[i].series == "single") return i;
    if (!best || runs[i].world_size < runs[*best].world_size) best = i;
  }
  return best;
}

}  // namespace

fs::path plot_runs(const PlotRequest& request) {
  if (request.runs.empty())
    throw UsageError("`strata plot` needs at least one run directory.",
                     "Write `strata plot runs/a runs/b [--out report.html]`.");
  Report report;
  report.date = utc_time("%Y-%m-%d %H:%M UTC");
  report.machine = machine_description();
  for (const auto& dir : request.runs) {
    ReportRun run = read_run(dir);
    for (const auto& other : report.runs)
      if (other.label == run.label) run.label = run.dir;  // two runs of the same name from different places
    report.runs.push_back(std::move(run));
  }
  auto& runs = report.runs;
  const auto base = choose_baseline(request, runs, report.notes);

  if (base) {
    // Runs of the baseline's strategy and world size count as its repeats; every series and world
    // size is measured against that cell.
    const ReportRun& b = runs[*base];
    std::vector<double> times;
    for (const auto& r : runs)
      if (r.ok() && r.series == b.series && r.world_size == b.world_size) {
        const double steady = r.number("steady_step_time_s");
        times.push_back(std::isfinite(steady) ? steady : r.number("step_time_s"));
      }
    report.baseline_strategy = b.series;
    report.baseline_world_size = b.world_size;
    report.baseline = fmt::format("{} ({} at world size {}, step time {:.3g} ms)", b.label, b.series, b.world_size,
                                  1e3 * median(times));
    for (const auto& r : runs) {
      if (!r.ok()) continue;
      // The steps its figures cover: a resumed run's last segment's.
      const double steps = r.result.measured_steps(), batch = r.number("global_batch_size");
      if (steps != b.result.measured_steps() || batch != b.number("global_batch_size"))
        report.notes.push_back(fmt::format(
            "{} ran {:g} steps of global batch {:g}, the baseline {:g} of {:g}: its speedup compares unequal work "
            "(strong scaling needs the same steps and global batch)",
            r.label, steps, batch, b.result.measured_steps(), b.number("global_batch_size")));
    }
  } else {
    report.baseline = "none (no run succeeded)";
  }
  // The figures of every series and world size, as `strata compare` computes them.
  Aggregate figures = aggregate_report(report);
  report.cells = std::move(figures.cells);
  report.noise = std::move(figures.noise);
  for (const auto& r : runs)
    if (!r.ok()) report.notes.push_back(fmt::format("{} {}: {}", r.label, r.result.status, r.result.error));
  for (auto& note : resumed_notes(runs)) report.notes.push_back(std::move(note));
  report.title = fmt::format("Strata report: {} run{}", runs.size(), runs.size() == 1 ? "" : "s");
  report.facts.push_back("runs: " + std::to_string(runs.size()) + " directories given to `strata plot`");

  fs::path out = request.out.empty() ? fs::path("report.html") : request.out;
  if (fs::is_directory(out)) out /= "report.html";
  if (out.has_parent_path()) fs::create_directories(out.parent_path());
  write_text_file(out, render_report(report));
  return out;
}

}  // namespace strata
