#include "train/step_breakdown.hpp"

#include <algorithm>
#include <utility>

#include "train/median.hpp"

namespace strata {

namespace {
StepBreakdown::Seconds mean(const std::array<double, 4>& sums, std::int64_t steps) {
  const double n = steps > 0 ? static_cast<double>(steps) : 1.0;
  return {sums[0] / n, sums[1] / n, sums[2] / n, sums[3] / n};
}

/// The index of a phase's own figure in the sums (comm_wait is 2).
std::size_t slot(StepBreakdown::Phase phase) {
  return phase == StepBreakdown::kData ? 0 : phase == StepBreakdown::kCompute ? 1 : 3;
}

double seconds_between(const c10::Event& a, const c10::Event& b) { return a.elapsedTime(b) / 1000.0; }  // ms
}  // namespace

StepBreakdown::StepBreakdown(Comm& comm, torch::Device device)
    : comm_(comm), device_(device), events_(device.is_cuda()) {
  if (events_) StreamWaits::instance().enable(device_);
}

StepBreakdown::~StepBreakdown() {
  if (events_) StreamWaits::instance().disable();
}

void StepBreakdown::begin(Phase phase) {
  phase_ = phase;
  if (events_) {
    StreamWaits::instance().take();  // waits outside the phases (evaluation, reading the figures) are not the step's
    start_event_.emplace(record_timing_event(device_));
    return;
  }
  comm_at_start_ = comm_seconds();
  started_ = Clock::now();
}

void StepBreakdown::end() {
  if (events_) {
    if (!start_event_) return;
    pending_.push_back({phase_, steps_, std::move(*start_event_), record_timing_event(device_), StreamWaits::instance().take()});
    start_event_.reset();
    return;
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - started_).count();
  add(phase_, steps_, elapsed, comm_seconds() - comm_at_start_);
}

void StepBreakdown::add(Phase phase, std::int64_t step, double elapsed, double blocked) {
  blocked = std::max(0.0, blocked);
  if (step >= static_cast<std::int64_t>(per_step_.size())) per_step_.resize(static_cast<std::size_t>(step) + 1);
  for (auto* sums : {&sums_, &interval_, &per_step_[static_cast<std::size_t>(step)]}) {
    (*sums)[slot(phase)] += std::max(0.0, elapsed - blocked);
    (*sums)[2] += blocked;
  }
}

void StepBreakdown::settle(bool block) {
  while (!pending_.empty()) {
    Pending& p = pending_.front();
    const auto done = [](const c10::Event& e) { return e.query(); };
    if (!block && (!done(p.end) || !std::all_of(p.waits.begin(), p.waits.end(),
                                                [&](const StreamWaits::Pair& w) { return done(w.after); })))
      return;
    if (block) {
      p.end.synchronize();
      for (const auto& w : p.waits) w.after.synchronize();  // a wait on another stream may end later
    }
    double blocked = 0;
    for (const auto& w : p.waits) blocked += seconds_between(w.before, w.after);
    add(p.phase, p.step, seconds_between(p.start, p.end), blocked);
    pending_.pop_front();
  }
}

void StepBreakdown::end_step() {
  ++steps_;
  if (events_) settle(/*block=*/false);
}

StepBreakdown::Seconds StepBreakdown::take_interval() {
  if (events_) settle(/*block=*/true);
  const auto out = mean(interval_, steps_ - interval_from_);
  interval_ = {};
  interval_from_ = steps_;
  return out;
}

StepBreakdown::Seconds StepBreakdown::total(bool wait_for_device) {
  if (events_) settle(wait_for_device);
  // Without waiting, the steps whose phases are still pending count as done: a lower bound.
  return mean(sums_, steps_);
}

StepBreakdown::Seconds StepBreakdown::steady(std::int64_t skip, bool wait_for_device) {
  if (events_) settle(wait_for_device);
  std::array<double, 4> medians{};
  const auto from = static_cast<std::size_t>(std::clamp<std::int64_t>(skip, 0, steps_));
  const auto to = std::min(per_step_.size(), static_cast<std::size_t>(steps_));
  if (from >= to) return mean(sums_, steps_);
  for (std::size_t k = 0; k < 4; ++k) {
    std::vector<double> v;
    for (std::size_t s = from; s < to; ++s) v.push_back(per_step_[s][k]);
    medians[k] = median(std::move(v));
  }
  return {medians[0], medians[1], medians[2], medians[3]};
}

}  // namespace strata
