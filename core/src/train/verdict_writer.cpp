// The verdict of a failed run, written by the training loop (train/loop.hpp): on the failure path
// of every rank (the record for the launcher and the peers, then the summary with the verdict), or
// by the job monitor's thread when this rank is stuck in a collective it cannot leave. Rank 0
// writes summary.json; a rank that lost rank 0 writes its own summary_rank<r>.json.

#include <string>

#include <fmt/format.h>

#include "io/run_dir.hpp"
#include "text/errors_text.hpp"
#include "train/loop.hpp"

namespace strata::trainer {

/// What the job monitor writes should this rank be stuck when the job fails (a peer stopped and
/// Gloo cannot abort the collective): the summary as of the end of setup, with the verdict and
/// the steps done. Runs on the monitor's thread: it touches only the copy, the monitor and the
/// event writer (which is thread-safe).
void Loop::register_verdict() {
  if (r_.monitor == nullptr) return;
  r_.monitor->set_verdict_writer([this, base = summary("failed", "")](const FailureRecord& verdict) {
    Json s = base;
    s["steps"] = r_.monitor->step();
    s["written_by"] = "watchdog";
    write_verdict(s, verdict);
    end_events(false);
  });
}

/// summary.json with the verdict (rank 0); a rank that lost rank 0 writes its own
/// summary_rank<r>.json, since rank 0 cannot.
void Loop::write_verdict(Json s, const FailureRecord& verdict) const {
  s["status"] = verdict.status;
  s["error"] = verdict.error;
  s["failed_rank"] = verdict.cause_rank ? Json(*verdict.cause_rank) : Json();
  // Where the failed rank was, when known.
  s["failed_phase"] = verdict.phase.empty() ? Json() : Json(verdict.phase);
  s["failed_step"] = verdict.step ? Json(*verdict.step) : Json();
  if (rank0_) {
    write_text_file(r_.place.run_dir / "summary.json", s.dump() + "\n");
  } else if (verdict.cause_rank == 0) {
    s["rank"] = comm_.rank();
    write_text_file(r_.place.run_dir / fmt::format("summary_rank{}.json", comm_.rank()), s.dump() + "\n");
  }
}

/// The failure path of every rank: the record for the launcher and the peers, then the summary.
void Loop::fail(const std::exception& error) {
  progress_.finish();
  FailureRecord verdict{comm_.rank(), "failed", detail::exception_text(error), comm_.rank(), unix_time_now()};
  if (r_.monitor != nullptr) {
    r_.monitor->set_verdict_writer(nullptr);  // this thread writes it
    verdict = r_.monitor->record_failure(error);
  }
  memory_.measure_failed();
  try {
    write_verdict(summary(verdict.status, ""), verdict);
    end_events(false);
  } catch (const std::exception& e) {
    log_.warn(std::string("could not write the failed run's summary: ") + e.what());
  }
}

}  // namespace strata::trainer
