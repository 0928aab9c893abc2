#include "io/run_result.hpp"

#include <cmath>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "strata/errors.hpp"

namespace strata {

double RunResult::number(const std::string& path) const {
  if (!summary) return NAN;
  const Json* v = summary->at_path(path);
  return v ? v->number_or(NAN) : NAN;
}

double RunResult::measured_steps() const { return segments.empty() ? NAN : segments.back().steps; }

StepTiming RunResult::step_timing() const {
  StepTiming t;
  // A run of no steady step (0 steps) writes 0: no figure, not an infinitely fast run.
  const auto positive = [](double v) { return v > 0 && std::isfinite(v) ? v : NAN; };
  const double steady = positive(number("steady_step_time_s"));
  const Json* key = summary ? summary->find("steady_step_time_s") : nullptr;
  t.steady = !summary || (key && !key->is_null());
  t.step_time_s = t.steady ? steady : positive(number("step_time_s"));
  const double batch = number("global_batch_size");
  t.samples_per_s = t.steady ? positive(number("steady_samples_per_s")) : batch / t.step_time_s;
  if (!std::isfinite(t.samples_per_s) && std::isfinite(batch)) t.samples_per_s = batch / t.step_time_s;
  return t;
}

std::string RunSegment::text() const {
  return fmt::format("{}@{} (steps {:g}-{:g})", strategy.empty() ? std::string("?") : strategy, world_size, from_step,
                     to_step);
}

namespace {

/// A segment from an object with strategy, world_size, backend, device and steps keys (an entry of
/// `segments`, or the summary itself); `from`/`to` default to 0 and the steps.
RunSegment segment_of(const Json& j) {
  const auto text = [&](const char* key) {
    const Json* v = j.find(key);
    return v ? v->string_or("") : std::string();
  };
  const auto number = [&](const char* key, double fallback) {
    const Json* v = j.find(key);
    const double n = v ? v->number_or(NAN) : NAN;
    return std::isfinite(n) ? n : fallback;
  };
  RunSegment s;
  s.strategy = text("strategy");
  s.world_size = static_cast<int>(number("devices", number("world_size", 1)));  // dp: its replicas, as the tables
  s.backend = text("backend");
  s.device = text("device");
  s.from_step = number("from_step", 0);
  s.to_step = number("to_step", s.from_step + number("steps", 0));
  s.steps = number("steps", s.to_step - s.from_step);
  return s;
}

}  // namespace

RunResult read_run_result(const std::filesystem::path& dir) {
  RunResult result;
  std::ifstream in(dir / "summary.json");
  if (!in) return result;
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  try {
    result.summary = Json::parse(text);
  } catch (const Error& e) {
    result.status = "failed";
    result.error = "summary.json: " + std::string(e.what());
    return result;
  }
  if (const Json* segments = result.summary->find("segments"); segments && segments->elements())
    for (const auto& segment : *segments->elements()) result.segments.push_back(segment_of(segment));
  if (result.segments.empty()) result.segments.push_back(segment_of(*result.summary));
  const Json* status = result.summary->find("status");
  result.status = status ? status->string_or("failed") : "failed";
  if (const Json* err = result.summary->find("error")) result.error = err->string_or("");
  return result;
}

std::string error_from_output(const std::vector<std::string>& lines) {
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const auto& l = lines[i];
    if (l.rfind("error:", 0) != 0 && l.find("] error:") == std::string::npos) continue;
    std::string text = l;
    for (std::size_t j = i + 1; j < lines.size() && lines[j].rfind("  ", 0) == 0; ++j)
      text.append(" ").append(lines[j].substr(2));
    for (const auto& rest : lines)
      if (rest.rfind("strata: rank ", 0) == 0) text.append(" (").append(rest).append(")");
    return text;
  }
  std::string text;
  for (std::size_t i = lines.size() > 3 ? lines.size() - 3 : 0; i < lines.size(); ++i)
    text.append(text.empty() ? "" : " | ").append(lines[i]);
  return text.empty() ? "no output" : text;
}

}  // namespace strata
