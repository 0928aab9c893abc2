#include "strata/offload.hpp"

#include <c10/core/DeviceGuard.h>
#include <c10/core/Event.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/torch.h>

namespace strata::inline kit_v3 {

namespace {
/// Waits on the host for what the current stream of `device` has enqueued (nothing on the CPU).
void wait_for_device(const torch::Device& device) {
  if (device.is_cpu()) return;
  const auto* impl = c10::impl::getDeviceGuardImpl(device.type());
  c10::Event done(device.type());
  done.record(impl->getStream(device));
  done.synchronize();
}
}  // namespace

OffloadedOptimizer::OffloadedOptimizer(std::vector<torch::Tensor> masters, const OptimizerSpec& spec)
    : Optimizer(std::move(masters)) {
  torch::NoGradGuard no_grad;
  for (const auto& m : params_) {
    const bool pin = !m.device().is_cpu();  // pinned pages make the copies asynchronous (DMA)
    auto host = torch::empty(m.sizes(), m.options().device(torch::kCPU).pinned_memory(pin));
    host.copy_(m);
    host.mutable_grad() = torch::zeros_like(host);
    host_.push_back(host);
  }
  host_optimizer_ = make_optimizer(host_, spec);
}

void OffloadedOptimizer::step(double lr) {
  torch::NoGradGuard no_grad;
  if (params_.empty()) return;
  for (std::size_t i = 0; i < params_.size(); ++i)
    host_[i].mutable_grad().copy_(params_[i].grad(), /*non_blocking=*/true);
  wait_for_device(params_.front().device());  // the gradients are on the host now
  host_optimizer_->step(lr);
  // Ordered on the compute stream before anything that reads the masters; the host copies are
  // only written again after the next step's gradient copy, which that stream runs after these.
  for (std::size_t i = 0; i < params_.size(); ++i) params_[i].copy_(host_[i], /*non_blocking=*/true);
}

void OffloadedOptimizer::state_loaded() {
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < params_.size(); ++i) host_[i].copy_(params_[i]);
  host_optimizer_->state_loaded();
}

std::int64_t OffloadedOptimizer::host_master_bytes() const {
  std::int64_t bytes = 0;
  for (const auto& h : host_) bytes += h.nbytes() + (h.grad().defined() ? h.grad().nbytes() : 0);
  return bytes;
}

}  // namespace strata::inline kit_v3
