#include "train/sync_audit.hpp"

#include <c10/cuda/CUDAFunctions.h>

namespace strata {

namespace {
void set_mode(c10::cuda::SyncDebugMode mode) { c10::cuda::warning_state().set_sync_debug_mode(mode); }
}  // namespace

SyncAudit::SyncAudit(bool on, const c10::Device& device) : enabled_(on && device.is_cuda()) {}

SyncAudit::Window::Window(const SyncAudit& audit, bool audited) : active_(audit.enabled() && audited) {
  if (active_) set_mode(c10::cuda::SyncDebugMode::L_ERROR);
}

SyncAudit::Window::~Window() {
  if (active_) set_mode(c10::cuda::SyncDebugMode::L_DISABLED);
}

}  // namespace strata
