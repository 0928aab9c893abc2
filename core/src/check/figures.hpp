#pragma once
// The figures `strata check` holds a strategy's runs to: the model state per rank and the bus bytes
// per step against the schedule the strategy declares (strata/schedule.hpp), or consistency bounds
// where it declares none. Each takes what a finished run reported (summary.json) and says whether
// it holds, and why, as a row of the check's table.

#include <string>
#include <vector>

#include "io/run_result.hpp"
#include "strata/schedule.hpp"

namespace strata::check_figures {

/// A row's verdict and detail.
struct Finding {
  bool ok = false;
  std::string detail;
};

/// Model state per rank, category by category, against the schedule's ScheduleMemory within 5%
/// plus padding (< N elements per flat group, at most one group per parameter tensor) and AdamW's
/// step counts. No schedule: between the 1/N share and twice the full model.
Finding memory(int w, const RunResult& run, const std::vector<Schedule>& plans);

/// One workload's run at world size w, with what it is shown as and the schedules of its steps.
struct WorkloadRun {
  const RunResult* result = nullptr;
  std::string title;
  int micro_batches = 1;
  const std::vector<Schedule>* plans = nullptr;  ///< empty: the strategy declares none
};

/// Bus bytes per step against the schedule's collectives (their mean over the steps run) within
/// 2% plus padding and the norm all-reduces, on every workload. No schedule: counted above world
/// size 1. At world size 1: none.
/// `declared`: the strategy has a scheduler (else the detail says it is counted only).
Finding communication(int w, const std::vector<WorkloadRun>& runs, bool declared);

}  // namespace strata::check_figures
