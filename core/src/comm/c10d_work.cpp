// The waits of a launched c10d collective (comm/c10d_work.hpp). On NCCL a stream-ordered wait is
// timed on the stream that waits (comm/stream_waits.hpp); the host time of every wait is booked.

#include "comm/c10d_work.hpp"

#include <optional>
#include <utility>

#include "comm/comm_errors.hpp"
#include "comm/stream_waits.hpp"

namespace strata::detail {

void C10dWork::complete(bool host) {
  std::lock_guard lock(mutex_);
  if (host_done_ || (ordered_ && !host)) return;
  auto start = Clock::now();
  try {
    // kNoTimeout: NCCL only blocks the current stream; an explicit timeout blocks the host.
    // Stream-ordered waits are timed on the stream that waits (comm/stream_waits.hpp).
    auto before = info_.stream_ordered ? StreamWaits::instance().before_wait() : std::nullopt;
    if (host) work_->wait(info_.timeout);
    else work_->wait();
    StreamWaits::instance().after_wait(std::move(before));
    if (!ordered_ && finish_) finish_();
  } catch (...) {
    accounting_->add_time(info_.phase, seconds_since(start));
    work_.reset();
    host_done_ = ordered_ = true;
    throw collective_failed(info_.rank, info_.who, info_.op, info_.bytes, info_.timeout);
  }
  ordered_ = true;
  if (host) {
    host_done_ = true;
    work_.reset();  // drop c10d's references to the tensors
  }
  accounting_->add_time(info_.phase, seconds_since(start));
}

}  // namespace strata::detail
