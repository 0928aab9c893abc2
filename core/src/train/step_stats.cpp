#include "train/step_stats.hpp"

#include "comm/stream_waits.hpp"

#include <torch/cuda.h>

namespace strata {

StepStats::StepStats(torch::Device device, Comm& comm, bool sync_timing)
    : device_(device), comm_(comm), events_(device.is_cuda() && !sync_timing), sync_(device.is_cuda() && sync_timing) {}

void StepStats::begin_step() {
  started_ = Clock::now();
  if (events_) {
    start_event_ = record_timing_event(device_);
  }
}

void StepStats::end_step(std::int64_t step, const torch::Tensor& loss, const torch::Tensor& norm) {
  if (!norm.defined() && !no_norm_.defined())  // once: the placeholder of steps without a norm
    no_norm_ = torch::full({}, NAN, torch::TensorOptions().dtype(torch::kFloat64).device(loss.device()));
  Pending p;
  p.step = step;
  p.loss = loss.detach().reshape({}).to(torch::kFloat64);
  p.norm = norm.defined() ? norm.detach().reshape({}).to(torch::kFloat64) : no_norm_;
  p.has_norm = norm.defined();
  if (events_) {
    p.start = std::move(start_event_);
    start_event_.reset();
    p.end = record_timing_event(device_);
  } else {
    if (sync_) torch::cuda::synchronize(device_.index());
    p.host_time_s = std::chrono::duration<double>(Clock::now() - started_).count();
  }
  pending_.push_back(std::move(p));
}

std::vector<StepStats::Row> StepStats::read() {
  std::vector<Row> rows;
  if (pending_.empty()) return rows;
  std::vector<torch::Tensor> losses, norms;
  for (const auto& p : pending_) {
    losses.push_back(p.loss);
    norms.push_back(p.norm);
  }
  auto loss = torch::stack(losses);
  if (comm_.world_size() > 1) {
    const CommPhase phase = CommPhase::kTrain;
    comm_.set_phase(CommPhase::kEval);  // bookkeeping traffic is not the strategy's
    comm_.all_reduce(loss, ReduceOp::kAvg);
    comm_.set_phase(phase);
  }
  const auto host = torch::cat({loss, torch::stack(norms)}).to(torch::kCPU);  // the host sync
  const auto* values = host.data_ptr<double>();
  const auto n = pending_.size();
  for (std::size_t i = 0; i < n; ++i) {
    auto& p = pending_[i];
    double time_s = p.host_time_s;
    if (p.start && p.end) {
      p.end->synchronize();
      time_s = p.start->elapsedTime(*p.end) / 1000.0;  // milliseconds
    }
    rows.push_back({p.step, values[i], values[n + i], time_s, p.has_norm});
  }
  pending_.clear();
  return rows;
}

}  // namespace strata
