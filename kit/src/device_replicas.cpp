#include "strata/device_replicas.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <optional>
#include <thread>

#include <c10/core/DeviceGuard.h>
#include <torch/utils.h>

#include "strata/errors.hpp"

namespace strata::inline kit_v3 {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }
}  // namespace

void DeviceReplicaEngine::take_over_devices(const StrategySetup& s, std::vector<torch::Device> devices, Plan plan) {
  if (s.comm->world_size() != 1)
    throw Error(plan.owner + " runs in one process, but this job has " + std::to_string(s.comm->world_size()) +
                    " ranks.",
                "Run " + plan.owner + " with nproc = 1 and set strategy.replicas to the number of devices.");
  if (!s.make_model)
    throw Error(plan.owner + " needs StrategySetup::make_model to build its replicas; this host gives none.",
                "Run " + plan.owner + " under the strata CLI, which provides it.");
  if (devices.empty()) throw Error(plan.owner + ": no device to run on");
  devices_ = std::move(devices);
  StrategySetup primary = s;
  primary.device = devices_.front();
  take_over(primary, std::move(plan));  // the model, its masters and the optimizer live on device 0
  replicas_.push_back(model_);
  replica_params_.push_back(params_);
  for (std::size_t k = 1; k < devices_.size(); ++k) {
    auto replica = s.make_model();
    replica->to(devices_[k]);
    if (precision_.mixed()) replica->to(precision_.param_dtype());
    std::vector<torch::Tensor> trainable;
    for (auto& [name, p] : unique_trainable_parameters(*replica)) trainable.push_back(p);
    if (trainable.size() != params_.size())
      throw Error(plan_.owner + ": a replica built by the model plugin has a different number of parameters.",
                  "The model factory must build the same architecture every time.");
    replicas_.push_back(std::move(replica));
    replica_params_.push_back(std::move(trainable));
  }
  copy_to_replicas();  // booked to setup, like the broadcast of the other strategies
  if (devices_.front().is_cpu() && devices_.size() > 1) {
    // The replicas' threads share the process's intra-op threads: split them, as the launcher
    // does for the ranks of one host.
    torch::set_num_threads(std::max(1, torch::get_num_threads() / static_cast<int>(devices_.size())));
  }
}

torch::Tensor DeviceReplicaEngine::forward_backward(const Batch& batch, MicroStep micro) {
  const auto k = static_cast<std::int64_t>(replicas_.size());
  const std::int64_t n = batch.size();
  std::vector<torch::Tensor> losses(replicas_.size());  // each chunk's summed loss, on its device
  std::vector<std::exception_ptr> errors(replicas_.size());
  auto run = [&](std::size_t r) {
    try {
      // torch::tensor_split's cut: the first n % k chunks take one example more.
      const auto i = static_cast<std::int64_t>(r);
      const auto lo = i * (n / k) + std::min(i, n % k), hi = lo + n / k + (i < n % k ? 1 : 0);
      if (hi == lo) return;
      std::optional<c10::DeviceGuard> guard;
      if (!devices_[r].is_cpu()) guard.emplace(devices_[r]);
      const Batch chunk = batch.slice(lo, hi).to(devices_[r], /*non_blocking=*/true);
      // Summed losses times the global scale: the replicas' summed gradients equal single's.
      MicroStep mine = micro;
      mine.loss_scale = micro.loss_scale.to(devices_[r], /*non_blocking=*/true);
      losses[r] = loss_backward(*replicas_[r], chunk, mine);
    } catch (...) {
      errors[r] = std::current_exception();
    }
  };
  reducer_->begin_backward(micro);  // device 0's replica: float32 accumulation hooks
  std::vector<std::thread> threads;
  for (std::size_t r = 1; r < replicas_.size(); ++r) threads.emplace_back(run, r);
  run(0);
  for (auto& t : threads) t.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  reducer_->end_backward(micro);
  reduce_to_primary();
  after_backward(micro);
  torch::Tensor sum;
  for (const auto& l : losses)
    if (l.defined()) sum = sum.defined() ? sum + l.to(devices_.front()) : l.to(devices_.front());
  return sum;
}

void DeviceReplicaEngine::step(double lr) {
  Engine::step(lr);
  copy_to_replicas();
}

void DeviceReplicaEngine::state_loaded() {
  Engine::state_loaded();
  copy_to_replicas();
}

std::vector<std::uint32_t> DeviceReplicaEngine::replica_digests() const {
  std::vector<std::uint32_t> out;
  for (const auto& replica : replicas_) {
    std::uint32_t crc = 0;
    for (const auto& t : replica->parameters()) crc = tensor_digest(t, crc);
    for (const auto& t : replica->buffers()) crc = tensor_digest(t, crc);
    out.push_back(crc);
  }
  return out;
}

void DeviceReplicaEngine::reduce_to_primary() {
  // Every other replica's gradients of this micro-batch into device 0's float32 buffers (in the
  // policy's reduce dtype on the way), then dropped.
  if (replicas_.size() == 1) return;
  const auto start = Clock::now();
  torch::NoGradGuard no_grad;
  std::int64_t bytes = 0;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    for (std::size_t r = 1; r < replicas_.size(); ++r) {
      auto& g = replica_params_[r][i].mutable_grad();
      if (!g.defined()) continue;
      auto wire = precision_.wire(g);
      if (r == 1) bytes += static_cast<std::int64_t>(wire.nbytes());
      grad_view(i).add_(wire.to(devices_.front(), /*non_blocking=*/true));
      g = torch::Tensor();
    }
  }
  book(bytes, seconds_since(start));
}

void DeviceReplicaEngine::copy_to_replicas() {
  if (replicas_.size() == 1) return;
  const auto start = Clock::now();
  torch::NoGradGuard no_grad;
  const auto buffers = model_->buffers();
  std::int64_t bytes = 0;
  for (const auto& p : params_) bytes += static_cast<std::int64_t>(p.nbytes());
  for (const auto& b : buffers) bytes += static_cast<std::int64_t>(b.nbytes());
  for (std::size_t r = 1; r < replicas_.size(); ++r) {
    for (std::size_t i = 0; i < params_.size(); ++i) replica_params_[r][i].copy_(params_[i], /*non_blocking=*/true);
    auto theirs = replicas_[r]->buffers();
    for (std::size_t i = 0; i < buffers.size(); ++i) theirs[i].copy_(buffers[i]);
  }
  book(bytes, seconds_since(start));
}

void DeviceReplicaEngine::book(std::int64_t bytes, double seconds) {
  // One transfer of `bytes` (one replica's worth) to or from each of the K-1 other devices.
  const auto others = static_cast<double>(replicas_.size() - 1);
  comm_->book(bytes, others * static_cast<double>(bytes), seconds);
}

}  // namespace strata::inline kit_v3
