#include "compare/accuracy.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "compare/stats.hpp"

namespace strata {

namespace {

const Json* predicted_row(const Json& estimate, const std::string& strategy, int world) {
  const Json* rows = estimate.find("rows");
  if (rows == nullptr || rows->elements() == nullptr) return nullptr;
  for (const auto& row : *rows->elements()) {
    const Json* s = row.find("strategy");
    const Json* n = row.find("world_size");
    if (s != nullptr && n != nullptr && s->string_or("") == strategy && static_cast<int>(n->number_or(0)) == world)
      return &row;
  }
  return nullptr;
}

double json_number(const Json& j, const std::string& path) {
  const Json* v = j.at_path(path);
  return v != nullptr ? v->number_or(NAN) : NAN;
}

std::string percent(double e) { return std::isfinite(e) ? fmt::format("{:+.1f}%", 100 * e) : "n/a"; }

std::string mib(double b) { return std::isfinite(b) ? fmt::format("{:.2f}", b / (1024.0 * 1024.0)) : "n/a"; }

}  // namespace

Accuracy accuracy(const std::vector<ReportCell>& cells, const Json& estimate) {
  Accuracy a;
  std::vector<double> time_errors, memory_errors;
  for (const auto& cell : cells) {
    if (cell.ok == 0) continue;
    const Json* p = predicted_row(estimate, cell.series, cell.world_size);
    if (p == nullptr) {
      a.unmatched.push_back(cell.name());
      continue;
    }
    if (const Json* applicable = p->find("applicable"); applicable != nullptr && !applicable->bool_or(true)) continue;
    AccuracyRow r;
    r.strategy = cell.series;
    r.world_size = cell.world_size;
    r.predicted_s = json_number(*p, "step_time_s");
    r.measured_s = cell.step_time_s.median;
    r.spread = cell.step_time_s.n > 1 ? cell.step_time_s.relative_range() : 0.0;
    r.noisy = r.spread > kAccuracyNoise;
    const double process = json_number(*p, "memory.process_peak_bytes");
    r.process_bytes = std::isfinite(process) && process > 0;
    r.predicted_bytes = r.process_bytes ? process : json_number(*p, "memory.peak_bytes");
    r.measured_bytes = cell.peak_tensor_bytes.n > 0 ? cell.peak_tensor_bytes.median : NAN;
    if (const Json* coarse = p->find("coarse")) r.coarse = coarse->bool_or(false);
    a.rows.push_back(r);
  }
  // The cells above world size 1; on one device only (every strategy at world size 1, as on one
  // GPU), the strategies other than the baseline's, whose run is the profile itself.
  const bool above_1 = std::any_of(a.rows.begin(), a.rows.end(), [](const AccuracyRow& r) { return r.world_size > 1; });
  std::string baseline = "single";
  if (const Json* b = estimate.find("baseline")) {
    const std::string text = b->string_or("single@1");
    baseline = text.substr(0, text.find('@'));
  }
  a.counted_world_1 = !above_1;
  const auto median = [](const std::vector<double>& v) { return v.empty() ? NAN : stats::spread(v).median; };
  for (auto& r : a.rows) {
    r.counted = above_1 ? r.world_size > 1 : r.strategy != baseline;
    if (!r.counted) continue;
    auto it = std::find_if(a.strategies.begin(), a.strategies.end(),
                           [&](const StrategyAccuracy& s) { return s.strategy == r.strategy; });
    if (it == a.strategies.end()) it = a.strategies.insert(a.strategies.end(), StrategyAccuracy{r.strategy});
    if (r.noisy) {
      ++it->noisy;
      continue;
    }
    ++it->cells;
    if (std::isfinite(r.time_error())) time_errors.push_back(std::fabs(r.time_error()));
    if (std::isfinite(r.memory_error())) memory_errors.push_back(std::fabs(r.memory_error()));
  }
  for (auto& s : a.strategies) {
    std::vector<double> t, m;
    for (const auto& r : a.rows)
      if (r.counted && !r.noisy && r.strategy == s.strategy) {
        if (std::isfinite(r.time_error())) t.push_back(std::fabs(r.time_error()));
        if (std::isfinite(r.memory_error())) m.push_back(std::fabs(r.memory_error()));
      }
    s.median_time_error = median(t);
    s.median_memory_error = median(m);
  }
  a.counted = time_errors.size();
  a.median_time_error = median(time_errors);
  a.median_memory_error = median(memory_errors);
  return a;
}

std::string accuracy_markdown(const Accuracy& a) {
  const auto median_text = [](double e) { return std::isfinite(e) ? fmt::format("{:.1f}%", 100 * e) : std::string("n/a"); };
  std::string md =
      "| strategy | N | predicted ms | measured ms | spread | error | predicted MiB | measured MiB | error |\n"
      "|:---------|--:|------:|------:|------:|------:|------:|------:|------:|\n";
  for (const auto& r : a.rows)
    md += fmt::format("| {}{} | {} | {:.2f} | {:.2f} | {:.1f}%{} | {} | {}{} | {} | {} |\n", r.strategy,
                      r.coarse ? " ~" : "", r.world_size, 1e3 * r.predicted_s, 1e3 * r.measured_s, 100 * r.spread,
                      r.noisy ? " (noisy)" : "", percent(r.time_error()), mib(r.predicted_bytes),
                      r.process_bytes ? " (process)" : "", mib(r.measured_bytes), percent(r.memory_error()));
  md += fmt::format("\nMedian absolute error over the {} cells {} whose measured spread is within {:.0f}%: step time "
                    "{}, peak memory {}.\n",
                    a.counted, a.counted_world_1 ? "at world size 1 other than the baseline's" : "above world size 1",
                    100 * kAccuracyNoise, median_text(a.median_time_error), median_text(a.median_memory_error));
  if (!a.strategies.empty()) {
    md += "\n| strategy | cells | median step time error | median memory error | noisier cells |\n"
          "|:---------|------:|------:|------:|------:|\n";
    for (const auto& s : a.strategies)
      md += fmt::format("| {} | {} | {} | {} | {} |\n", s.strategy, s.cells, median_text(s.median_time_error),
                        median_text(s.median_memory_error), s.noisy);
  }
  std::string noisy;
  for (const auto& r : a.rows)
    if (r.counted && r.noisy)
      noisy += fmt::format("{}{}@{} (spread {:.0f}%, error {})", noisy.empty() ? "" : ", ", r.strategy, r.world_size,
                           100 * r.spread, percent(r.time_error()));
  if (!noisy.empty())
    md += fmt::format("\nNoisier than {:.0f}% (reported apart, out of the medians): {}.\n", 100 * kAccuracyNoise, noisy);
  auto worst = [&](auto error, const char* what) {
    std::vector<const AccuracyRow*> rows;
    for (const auto& r : a.rows)
      if (r.counted && !r.noisy && std::isfinite(error(r))) rows.push_back(&r);
    std::sort(rows.begin(), rows.end(), [&](auto* x, auto* y) { return std::fabs(error(*x)) > std::fabs(error(*y)); });
    std::string list;
    for (std::size_t i = 0; i < std::min<std::size_t>(3, rows.size()); ++i)
      list += fmt::format("{}{}@{} ({})", i ? ", " : "", rows[i]->strategy, rows[i]->world_size, percent(error(*rows[i])));
    return list.empty() ? std::string() : fmt::format("Worst {}: {}.\n", what, list);
  };
  md += worst([](const AccuracyRow& r) { return r.time_error(); }, "step time");
  md += worst([](const AccuracyRow& r) { return r.memory_error(); }, "memory");
  if (!a.unmatched.empty()) {
    md += "Not predicted (a cell of another axis than strategy and world size): ";
    for (std::size_t i = 0; i < a.unmatched.size(); ++i) md += (i ? ", " : "") + a.unmatched[i];
    md += ".\n";
  }
  return md;
}

std::string accuracy_csv(const Accuracy& a) {
  std::string csv =
      "strategy,world_size,predicted_step_time_s,measured_step_time_s,step_time_error,predicted_peak_bytes,"
      "measured_peak_bytes,memory_error,process_bytes,coarse,measured_spread,noisy\n";
  for (const auto& r : a.rows)
    csv += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{}\n", r.strategy, r.world_size, r.predicted_s, r.measured_s,
                       r.time_error(), r.predicted_bytes, r.measured_bytes, r.memory_error(), r.process_bytes, r.coarse,
                       r.spread, r.noisy);
  return csv;
}

}  // namespace strata
