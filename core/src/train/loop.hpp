#pragma once
// The training loop's class, private to train/ (train/trainer.hpp's train() runs it). Its member
// definitions are split by concern, one file each:
//   train/trainer.cpp         the loop: setup, the steps, reading their figures, evaluation,
//                             checkpoints and the trainer state they carry, the end of the run
//   train/run_summary.cpp     summary.json: the run's summary, this process's segment, writing both
//   train/step_log.cpp        TensorBoard: opening the session, a log step's scalars, evaluation and
//                             checkpoint scalars, closing the session
//   train/verdict_writer.cpp  the verdict of a failed run: the failure path of every rank, and the
//                             writer the job monitor uses when this rank is stuck

#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/sampler.hpp"
#include "comm/job_monitor.hpp"
#include "io/json.hpp"
#include "job/verdict.hpp"
#include "tensorboard/event_writer.hpp"
#include "train/batches.hpp"
#include "train/checkpointer.hpp"
#include "train/evaluation.hpp"
#include "train/flops.hpp"
#include "train/progress.hpp"
#include "train/rank_run.hpp"
#include "train/run_memory.hpp"
#include "train/schedule.hpp"
#include "train/step_breakdown.hpp"
#include "train/step_stats.hpp"
#include "train/step_trace.hpp"
#include "train/sync_audit.hpp"

namespace strata::trainer {

using Clock = std::chrono::steady_clock;

class Loop {
 public:
  explicit Loop(RankRun& run)
      : r_(run),
        e_(run.experiment),
        comm_(*run.comm),
        log_(run.log),
        rank0_(comm_.rank() == 0),
        progress_(log_, e_.train.steps),
        memory_(run.device) {}

  Json run();

 private:
  // The loop (train/trainer.cpp).
  void setup();
  void train_step(std::int64_t step);
  /// Tells the job monitor what this rank is doing (its hang watch looks at "train" and "eval").
  void note_phase(const char* phase) {
    if (r_.monitor != nullptr) r_.monitor->note_phase(phase);
  }
  /// Whether step `step1` (1-based) reads its figures on the host and logs them.
  bool log_step(std::int64_t step1) const {
    return step1 % e_.log.every == 0 || step1 == e_.train.steps || step1 == 1;
  }
  torch::Tensor loss_scale(const std::vector<Batch>& batches);
  void read_steps(double lr, bool log_point = true);
  void save_checkpoint(std::int64_t step);
  Json trainer_state() const;
  void restore(const Resumed& resumed);
  EvalResult evaluate();
  void save_final_model(Json& summary);

  // TensorBoard (train/step_log.cpp): rank 0's events_, a no-op elsewhere.
  void open_events();
  void log_scalars(const StepStats::Row& row, double lr);
  void log_eval(std::int64_t step);
  void log_checkpoint(std::int64_t step, const ckpt::SaveResult& saved);
  void end_events(bool ok);

  // summary.json (train/run_summary.cpp).
  Json summary(const std::string& status, const std::string& error) const;
  /// This process's part of the run (a resumed run has one per process that trained it): its
  /// strategy, world, steps, times, memory and traffic.
  Json segment() const;
  void write_summary(const Json& summary) const;

  // The verdict of a failed run (train/verdict_writer.cpp).
  void register_verdict();
  void fail(const std::exception& error);
  void write_verdict(Json summary, const FailureRecord& verdict) const;

  // Inputs.
  RankRun& r_;
  const Experiment& e_;
  Comm& comm_;
  const Logger& log_;
  bool rank0_;

  // Per-run machinery.
  std::optional<BatchSampler> sampler_;
  std::optional<BatchLoader> batches_;
  std::optional<StepStats> stats_;  // loss, norm and time of the steps since the last log step
  // Data, compute, exposed communication, optimizer. Mutable: reading it (summary()) books the
  // phases the device has finished.
  mutable std::optional<StepBreakdown> breakdown_;
  MfuPeak mfu_peak_;                        // the peak MFU is measured against, if any
  SyncAudit audit_{false, torch::kCPU};      // [train] sync_audit: no host sync between log steps
  std::optional<StepTrace> trace_;           // [train] trace_steps: a profiler trace of those steps
  LrSchedule schedule_;
  DataSpec data_;
  torch::Tensor fixed_scale_;  // loss_scale when every sample has the same number of targets
  std::chrono::duration<double> slow_compute_{0};  // test hook: STRATA_FAULT=slow-compute:SECONDS
  std::unique_ptr<tb::EventWriter> events_;  // rank 0 only
  Progress progress_;
  std::optional<Checkpointer> checkpoints_;
  std::int64_t start_step_ = 0;  // steps done before this process (a resumed run)
  Json earlier_segments_ = Json::array();  // the segments of the processes before this one

  // Measurements (host values, read at log steps).
  std::vector<double> step_times_;
  std::vector<std::pair<std::int64_t, double>> loss_curve_;  // (step, loss) at log steps
  double train_time_s_ = 0;  // of this process's steps (this segment)
  Clock::time_point started_{};  // first step, for the progress line
  double last_loss_ = NAN;
  double last_grad_norm_ = NAN;
  std::int64_t steps_done_ = 0;  // steps whose figures were read and found finite
  std::optional<EvalResult> last_eval_;
  RunMemory memory_;                      // maximum over ranks once the run ends
  std::int64_t model_params_ = 0;
  std::int64_t model_tensors_ = 0;
  int devices_ = 1;  // devices the run computes on (ranks x devices per rank)
};

}  // namespace strata::trainer
