#include "check/figures.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

namespace strata::check_figures {

namespace {
constexpr double kMemoryRel = 0.05;   // model state against the schedule's, plus padding
constexpr double kTrafficRel = 0.02;  // bus bytes against the schedule's, plus padding and norms
}  // namespace

Finding memory(int w, const RunResult& run, const std::vector<Schedule>& plans) {
  const double full = run.number("parameters") * 4;
  const double tensors = run.number("parameter_tensors");
  struct Item {
    std::string name;
    double bytes, low, high;
    std::string why;
  };
  std::vector<Item> items;
  const auto measured = [&](const std::string& name) { return run.number("memory.model_state_bytes." + name); };
  if (!plans.empty()) {
    const ScheduleMemory& m = plans.back().memory;
    const double pad = 4.0 * w * tensors;  // per float32 copy
    const auto part = [&](const std::string& name, double expected, double copies, double extra) {
      items.push_back({name, measured(name), expected * (1 - kMemoryRel), expected * (1 + kMemoryRel) + copies * pad + extra,
                       fmt::format("{:.0f} B scheduled", expected)});
    };
    part("params", m.params, 1, 0);
    part("grads", m.grads, 1, 0);
    part("optimizer", m.optimizer, 2, 8 * tensors);
    for (const auto& [name, bytes] : m.extra) part(name, bytes, 1, 0);
  } else {
    items = {{"params", measured("params"), full / w * 0.95, 2 * full, "fp32 parameters"},
             {"grads", measured("grads"), full / w * 0.95, 2 * full, "fp32 gradients"},
             {"optimizer", measured("optimizer"), 2 * full / w * 0.95, 2 * full * 1.05, "2 AdamW states"}};
  }
  std::string held, wrong;
  for (const auto& it : items) {
    held += fmt::format("{}{} {:.0f} B", held.empty() ? "" : ", ", it.name, it.bytes);
    const bool zero_ok = it.low <= 0 && it.bytes == 0;
    if (!(std::isfinite(it.bytes) && (zero_ok || (it.bytes > 0 && it.bytes >= it.low && it.bytes <= it.high))))
      wrong += fmt::format("; {} {:.0f} B is outside [{:.0f}, {:.0f}] B ({} of {:.0f} parameters over {} ranks)",
                           it.name, it.bytes, it.low, it.high, it.why, full / 4, w);
  }
  // State the run reports that the schedule does not declare.
  if (const Json* state = run.summary ? run.summary->at_path("memory.model_state_bytes") : nullptr; state && state->members())
    for (const auto& [name, value] : *state->members())
      if (std::none_of(items.begin(), items.end(), [&](const Item& it) { return it.name == name; }) && value.number_or(0) > 0)
        wrong += fmt::format("; {} {:.0f} B is held but not in the schedule's memory", name, value.number_or(0));
  if (!std::isfinite(full) || full <= 0 || !std::isfinite(tensors)) wrong += "; summary.json has no parameter count";
  return {wrong.empty(), fmt::format("{} per rank; full fp32 parameters {:.0f} B; {}{}", held, full,
                  plans.empty() ? "no schedule: consistency bounds" : "the schedule's state within 5% + padding",
                  wrong)};
}

Finding communication(int w, const std::vector<WorkloadRun>& runs, bool declared) {
  std::string numbers, wrong;
  for (const auto& of : runs) {
    const RunResult& run = *of.result;
    const double bus = run.number("comm.bus_bytes_per_step"), calls = run.number("comm.calls_per_step");
    const double full = run.number("parameters") * 4, tensors = run.number("parameter_tensors");
    const int micro = of.micro_batches;
    numbers += fmt::format("{}{}: {:.0f} B/step in {:.3g} calls", numbers.empty() ? "" : "; ", of.title,
                           bus, calls);
    const auto& plans = *of.plans;
    if (w == 1) {
      if (bus != 0) wrong += fmt::format("; {}: expected no traffic at world size 1", of.title);
    } else if (!plans.empty()) {
      double expected = 0, ops = 0;
      std::map<int, double> levels;  // bus bytes by the ranks a collective spans
      for (const auto& s : plans) {
        expected += s.bus_bytes();
        for (const auto& op : s.ops())
          if (op.kind == ScheduleOp::Kind::kCollective) {
            ops += 1;
            levels[op.group] += op.bus_bytes() / static_cast<double>(plans.size());
          }
      }
      expected /= static_cast<double>(plans.size());
      ops /= static_cast<double>(plans.size());
      // Padding: fewer than N elements per flat group of a collective, at most one group per
      // tensor per model-sized transfer; the gradient norm's all-reduces (a float each).
      const double transfers = full > 0 ? expected / full : 0;
      const double slack = transfers * 4.0 * w * tensors + ops * 4.0 * w + 2 * 8.0 * (1 + micro);
      const bool ok = std::abs(bus - expected) <= kTrafficRel * expected + slack;
      std::string split;  // a two-level schedule: what moves at each level
      for (auto it = levels.rbegin(); levels.size() > 1 && it != levels.rend(); ++it)
        split += fmt::format("{}{:.0f} over {} ranks", split.empty() ? ": " : " + ", it->second, it->first);
      numbers += fmt::format(" (scheduled {:.0f}{} in {:.3g} collectives)", expected, split, ops);
      if (!ok)
        wrong += fmt::format("; {}: {:.0f} B/step is not the schedule's {:.0f} B within 2% + {:.0f} B of padding",
                             of.title, bus, expected, slack);
    } else if (!(bus > 0 && calls > 0)) {
      wrong += fmt::format("; {}: traffic is not accounted (every collective must go through strata::Comm)",
                           of.title);
    }
  }
  return {wrong.empty(), numbers + (declared || w == 1 ? "" : "; no schedule declared: counted only") + wrong};
}

}  // namespace strata::check_figures
