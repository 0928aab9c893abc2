#include "strata/offload.hpp"

#include <algorithm>

#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/types.h>

namespace strata::inline kit_v3 {

OffloadedOptimizer::OffloadedOptimizer(std::vector<torch::Tensor> masters, const OptimizerSpec& spec)
    : Optimizer(std::move(masters)) {
  torch::NoGradGuard no_grad;
  for (const auto& m : params_) {
    const bool pin = !m.device().is_cpu();  // pinned pages make the copies asynchronous (DMA)
    auto host = torch::empty(m.sizes(), m.options().device(torch::kCPU).pinned_memory(pin));
    host.copy_(m);
    host.mutable_grad() = torch::zeros_like(host);
    host_.push_back(host);
    host_optimizers_.push_back(make_optimizer({host}, spec));
  }
}

void OffloadedOptimizer::step(double lr) {
  torch::NoGradGuard no_grad;
  if (params_.empty()) return;
  if (!params_.front().device().is_cpu()) return step_on_gpu(lr);
  for (std::size_t i = 0; i < params_.size(); ++i) {
    host_[i].mutable_grad().copy_(params_[i].grad());
    host_optimizers_[i]->step(lr);
    params_[i].copy_(host_[i]);
  }
}

void OffloadedOptimizer::step_on_gpu(double lr) {
  const auto device = params_.front().device();
  const c10::impl::VirtualGuardImpl impl(device.type());
  const c10::Stream compute = impl.getStream(device);
  if (!copies_) copies_ = impl.getStreamFromGlobalPool(device, /*isHighPriority=*/false);
  // The copies start once the compute stream has produced the gradients (and read the masters).
  c10::Event produced(device.type());
  produced.record(compute);
  produced.block(*copies_);
  std::vector<c10::Event> landed;
  landed.reserve(params_.size());
  {
    const c10::StreamGuard on_copies(*copies_);
    for (std::size_t i = 0; i < params_.size(); ++i) {
      host_[i].mutable_grad().copy_(params_[i].grad(), /*non_blocking=*/true);
      landed.emplace_back(device.type());
      landed.back().record(*copies_);
    }
  }
  // Group by group: the host steps what has landed while the rest copies, and each updated master
  // goes back behind the gradients still in flight. The host copies are written again only after
  // the next step's gradient copy, which the copy stream runs after these.
  for (std::size_t i = 0; i < params_.size(); ++i) {
    landed[i].synchronize();
    host_optimizers_[i]->step(lr);
    const c10::StreamGuard on_copies(*copies_);
    params_[i].copy_(host_[i], /*non_blocking=*/true);
  }
  c10::Event back(device.type());
  back.record(*copies_);
  back.block(compute);  // what reads the masters next waits on the device, not the host
}

OptimizerState OffloadedOptimizer::state() const {
  OptimizerState merged;
  for (const auto& o : host_optimizers_)
    for (auto& [kind, tensors] : o->state()) {
      auto it = std::find_if(merged.begin(), merged.end(), [&](const auto& e) { return e.first == kind; });
      if (it == merged.end()) it = merged.insert(merged.end(), {kind, {}});
      it->second.insert(it->second.end(), tensors.begin(), tensors.end());
    }
  return merged;
}

void OffloadedOptimizer::init_state() {
  for (auto& o : host_optimizers_) o->init_state();
}

void OffloadedOptimizer::state_loaded() {
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < params_.size(); ++i) host_[i].copy_(params_[i]);
  for (auto& o : host_optimizers_) o->state_loaded();
}

std::int64_t OffloadedOptimizer::host_master_bytes() const {
  std::int64_t bytes = 0;
  for (const auto& h : host_) bytes += h.nbytes() + (h.grad().defined() ? h.grad().nbytes() : 0);
  return bytes;
}

}  // namespace strata::inline kit_v3
