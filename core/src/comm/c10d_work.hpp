#pragma once
// CommWork over a launched c10d collective (c10d::Work): the waits, c10d's error turned into a
// DistributedError, the finish step run once and the blocked time booked. Includes c10d headers:
// see the list at the top of comm/process_group.cpp.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include <torch/csrc/distributed/c10d/Work.hpp>

#include "comm/accounting.hpp"
#include "strata/comm.hpp"

namespace strata::detail {

/// What a collective needs after completion (copying a staged result back); may be empty.
using Finish = std::function<void()>;

/// A launched c10d collective. wait() orders the caller's stream after it (NCCL) or blocks until
/// it is done (Gloo); host_wait() always blocks. The first wait converts c10d's error into a
/// DistributedError, runs the finish step (copying a staged result back) and books the blocked
/// time to the phase of the call.
class C10dWork final : public CommWork {
 public:
  struct Info {
    std::string op;           ///< collective name for error messages
    std::int64_t bytes = 0;   ///< payload bytes for error messages
    CommPhase phase{};        ///< phase the call was booked to
    std::string who;          ///< "rank r of n"
    int rank = 0;
    std::chrono::milliseconds timeout{};
    bool stream_ordered = false;  ///< NCCL: wait() orders streams instead of blocking the host
  };

  C10dWork(std::shared_ptr<Accounting> accounting, Info info, c10::intrusive_ptr<c10d::Work> work, Finish finish)
      : accounting_(std::move(accounting)), info_(std::move(info)), work_(std::move(work)), finish_(std::move(finish)) {}

  void wait() override { complete(/*host=*/!info_.stream_ordered); }
  void host_wait() override { complete(/*host=*/true); }

 private:
  void complete(bool host);

  std::mutex mutex_;
  bool ordered_ = false;    // the caller's stream is ordered after the collective (finish step done)
  bool host_done_ = false;  // the host has seen it complete
  std::shared_ptr<Accounting> accounting_;
  Info info_;
  c10::intrusive_ptr<c10d::Work> work_;
  Finish finish_;
};

}  // namespace strata::detail
