#include "train/run_memory.hpp"

#include <algorithm>
#include <vector>

#include "tensorboard/event_writer.hpp"
#include "train/device_memory.hpp"
#include "train/tensor_memory.hpp"

namespace strata {

void RunMemory::end_setup() {
  peak_setup_bytes_ = tensor_memory::peak_bytes(device_);
  reset_peak_memory(device_);
  tensor_memory::reset_peak(device_);
}

void RunMemory::sample_device_used() {
  if (const auto used = device_used_bytes(device_))
    device_used_bytes_ = std::max(device_used_bytes_.value_or(0), *used);
}

void RunMemory::log(const Strategy& strategy, tb::EventWriter& events, std::int64_t step) {
  model_state_ = strategy.memory();
  sample_device_used();
  const auto scalar = [&](const char* tag, std::int64_t bytes) {
    events.add_scalar(tag, static_cast<double>(bytes), step);
  };
  scalar("memory/params_bytes", model_state_.params);
  scalar("memory/grads_bytes", model_state_.grads);
  scalar("memory/optimizer_bytes", model_state_.optimizer);
  for (const auto& [name, bytes] : model_state_.extra) scalar(("memory/" + name + "_bytes").c_str(), bytes);
  scalar("memory/peak_bytes", peak_memory_bytes(device_));
  scalar("memory/peak_tensor_bytes", tensor_memory::peak_bytes(device_));
  if (device_used_bytes_) scalar("memory/device_used_bytes", *device_used_bytes_);
}

void RunMemory::measure(const Strategy& strategy, Comm& comm) {
  model_state_ = strategy.memory();
  peak_bytes_ = peak_memory_bytes(device_);
  peak_tensor_bytes_ = tensor_memory::peak_bytes(device_);
  sample_device_used();
  if (comm.world_size() == 1) return;
  std::vector<double> mine{static_cast<double>(model_state_.params),    static_cast<double>(model_state_.grads),
                           static_cast<double>(model_state_.optimizer), static_cast<double>(peak_bytes_),
                           static_cast<double>(peak_tensor_bytes_),     static_cast<double>(peak_setup_bytes_),
                           static_cast<double>(device_used_bytes_.value_or(0))};
  for (const auto& [name, bytes] : model_state_.extra) mine.push_back(static_cast<double>(bytes));
  auto values = torch::tensor(mine, torch::kFloat64).to(comm.device());
  comm.set_phase(CommPhase::kEval);
  comm.all_reduce(values, ReduceOp::kMax);
  comm.set_phase(CommPhase::kTrain);
  values = values.to(torch::kCPU);
  const auto at = [&](int i) { return static_cast<std::int64_t>(values[i].item<double>()); };
  model_state_.params = at(0);
  model_state_.grads = at(1);
  model_state_.optimizer = at(2);
  for (std::size_t k = 0; k < model_state_.extra.size(); ++k) model_state_.extra[k].second = at(7 + static_cast<int>(k));
  peak_bytes_ = at(3);
  peak_tensor_bytes_ = at(4);
  peak_setup_bytes_ = at(5);
  if (device_used_bytes_) device_used_bytes_ = at(6);
}

void RunMemory::measure_failed() {
  peak_bytes_ = peak_memory_bytes(device_);
  peak_tensor_bytes_ = tensor_memory::peak_bytes(device_);
}

void RunMemory::write(Json& mem) const {
  mem["model_state_bytes"]["params"] = model_state_.params;
  mem["model_state_bytes"]["grads"] = model_state_.grads;
  mem["model_state_bytes"]["optimizer"] = model_state_.optimizer;
  for (const auto& [name, bytes] : model_state_.extra) mem["model_state_bytes"][name] = bytes;
  mem["peak_bytes"] = peak_bytes_;
  mem["peak_source"] = peak_memory_source(device_);
  mem["peak_tensor_bytes"] = peak_tensor_bytes_;
  mem["peak_setup_bytes"] = peak_setup_bytes_;
  mem["tensor_source"] = tensor_memory::source(device_);
  mem["device_used_bytes"] = device_used_bytes_ ? Json(*device_used_bytes_) : Json();  // null on the CPU
}

}  // namespace strata
