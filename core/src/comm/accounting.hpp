#pragma once
// The counters of a rank's c10d communicators: per phase (setup, train, eval) the calls, payload
// and bus bytes and the host time of every collective, the count of collectives issued and each
// communicator's last one (the job monitor's hang watch), and the count of groups created (part of
// their store prefix). One Accounting is shared by the job's communicator, its subgroups and
// separate streams, and their pending works, which may outlive them; calls may come from the
// autograd thread, hence the mutex.

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "comm/job_monitor.hpp"
#include "strata/comm.hpp"

namespace strata::detail {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct Accounting {
  mutable std::mutex mutex;
  CommPhase phase = CommPhase::kSetup;
  std::array<CommCounters, 3> counters{};
  int groups_created = 0;  // communicators created after the first (part of their store prefix)
  std::int64_t issued = 0;  // collectives issued by every communicator of this rank
  std::map<std::string, std::pair<std::int64_t, std::string>> last;  // per communicator: count, last one

  /// What a collective was booked as when it was issued.
  struct Issued {
    CommPhase phase;            ///< the phase it counts to
    std::int64_t train_calls;  ///< collectives of the training phase so far, this one included
  };

  /// Books a collective of `who` as it is issued: one call of `payload` bytes, `bus_factor` times
  /// that on the bus, to the current phase; it becomes `who`'s last collective.
  Issued issue(const std::string& who, const char* op, std::int64_t payload, double bus_factor) {
    std::lock_guard lock(mutex);
    auto& c = counters[static_cast<int>(phase)];
    c.calls += 1;
    c.payload_bytes += payload;
    c.bus_bytes += static_cast<double>(payload) * bus_factor;
    issued += 1;
    auto& [count, text] = last[who];
    text = fmt::format("{} #{} of {} bytes", op, ++count, payload);
    return {phase, counters[static_cast<int>(CommPhase::kTrain)].calls};
  }

  /// What the next collective would be booked as (issue() books it).
  Issued upcoming() const {
    std::lock_guard lock(mutex);
    const auto train = counters[static_cast<int>(CommPhase::kTrain)].calls;
    return {phase, phase == CommPhase::kTrain ? train + 1 : train};
  }

  /// Books host time spent in a call or a wait to phase `p`.
  void add_time(CommPhase p, double seconds) {
    std::lock_guard lock(mutex);
    counters[static_cast<int>(p)].time_s += seconds;
  }

  /// Books traffic a strategy moved by itself (Comm::book) to the current phase.
  void book(std::int64_t payload_bytes, double bus_bytes, double seconds) {
    std::lock_guard lock(mutex);
    auto& c = counters[static_cast<int>(phase)];
    c.calls += 1;
    c.payload_bytes += payload_bytes;
    c.bus_bytes += bus_bytes;
    c.time_s += seconds;
  }

  void set_phase(CommPhase p) {
    std::lock_guard lock(mutex);
    phase = p;
  }

  CommCounters of(CommPhase p) const {
    std::lock_guard lock(mutex);
    return counters[static_cast<int>(p)];
  }

  /// The index of the next communicator created. Every rank creates its communicators in the same
  /// order, so the count names the same group on every member.
  int next_group() {
    std::lock_guard lock(mutex);
    return groups_created++;
  }

  /// What this rank's communicators have issued, for the hang watch.
  JobProgress progress() const {
    std::lock_guard lock(mutex);
    JobProgress p;
    p.issued = issued;
    for (const auto& [comm, entry] : last) p.last.emplace_back(comm, entry.second);
    return p;
  }
};

}  // namespace strata::detail
