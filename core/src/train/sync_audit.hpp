#pragma once
// [train] sync_audit (a debug option, CUDA only): the step loop runs under CUDA's sync debug mode
// set to error between log steps, so a host sync anywhere in a step that is not a log step (a
// blocking copy to or from the device, .item(), a stream or device synchronize) fails the run
// with c10's message naming the call. The documented places where the host waits for the device
// are left out: log steps (the loss and gradient norm are read), evaluation, checkpoints, setup
// and the end of the run.

#include <c10/core/Device.h>

namespace strata {

class SyncAudit {
 public:
  /// Audits only when `on` and `device` is a GPU.
  SyncAudit(bool on, const c10::Device& device);

  /// While alive (and `audited`), a host sync is an error; afterwards it is allowed again.
  class Window {
   public:
    Window(const SyncAudit& audit, bool audited);
    ~Window();
    Window(const Window&) = delete;
    Window& operator=(const Window&) = delete;

   private:
    bool active_;
  };

  bool enabled() const noexcept { return enabled_; }

 private:
  bool enabled_;
};

}  // namespace strata
