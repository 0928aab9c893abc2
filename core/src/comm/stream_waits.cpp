#include "comm/stream_waits.hpp"

#include <c10/core/impl/VirtualGuardImpl.h>

namespace strata {

StreamWaits& StreamWaits::instance() {
  static StreamWaits waits;
  return waits;
}

void StreamWaits::enable(c10::Device device) {
  std::lock_guard lock(mutex_);
  device_ = device;
  pairs_.clear();
  enabled_.store(true, std::memory_order_release);  // device_ is set before any wait reads it
}

void StreamWaits::disable() {
  enabled_.store(false, std::memory_order_relaxed);
  std::lock_guard lock(mutex_);
  pairs_.clear();
}

c10::Event record_timing_event(c10::Device device) {
  // BACKEND_DEFAULT: a CUDA event with timing (PYTORCH_DEFAULT disables it).
  c10::Event event(device.type(), c10::EventFlag::BACKEND_DEFAULT);
  event.record(c10::impl::VirtualGuardImpl(device.type()).getStream(device));
  return event;
}

std::optional<c10::Event> StreamWaits::before_wait() {
  if (!enabled()) return std::nullopt;
  return record_timing_event(device_);
}

void StreamWaits::after_wait(std::optional<c10::Event> before) {
  if (!before || !enabled()) return;
  Pair pair{std::move(*before), record_timing_event(device_)};
  std::lock_guard lock(mutex_);
  pairs_.push_back(std::move(pair));
}

std::vector<StreamWaits::Pair> StreamWaits::take() {
  std::lock_guard lock(mutex_);
  return std::exchange(pairs_, {});
}

}  // namespace strata
