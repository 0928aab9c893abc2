// TensorBoard output of the training loop (train/loop.hpp): rank 0 opens the run's session (the
// session start that drops an earlier attempt's later points, the hparams session, the resolved
// config), writes a log step's scalars (train/*, perf/*, memory, comm/*), the evaluation and
// checkpoint scalars, and closes the session with the run's outcome. Every call is a no-op on the
// other ranks, which have no event writer. The summary/* scalars go with summary.json
// (train/run_summary.cpp).

#include <memory>
#include <string>

#include "config/experiment.hpp"
#include "tensorboard/hparams.hpp"
#include "train/loop.hpp"

namespace strata::trainer {

void Loop::open_events() {
  if (!rank0_) return;
  events_ = std::make_unique<tb::EventWriter>(r_.place.run_dir);
  // TensorBoard drops the points at and after this step that an earlier attempt logged (a run
  // resumed, or restarted, in its own directory).
  events_->add_session_start(start_step_ + 1);
  // Only the session: TensorBoard infers the experiment (marking what differs between the runs
  // it shows) unless `strata compare` wrote one for its directory. The metrics are the
  // summary/* scalars written with summary.json (write_summary).
  events_->start_hparams_session(tb::run_hparams(e_, comm_.world_size(), devices_, r_.device.str()));
  events_->add_text("config", "```toml\n" + resolved_toml(e_) + "```\n", 0);
  events_->flush();
}

void Loop::log_scalars(const StepStats::Row& row, double lr) {
  const std::int64_t step = row.step;
  const double step_time = row.time_s;
  if (!events_) return;
  events_->add_scalar("train/loss", row.loss, step);
  events_->add_scalar("train/lr", lr, step);
  events_->add_scalar("train/grad_norm", row.grad_norm, step);
  events_->add_scalar("perf/step_time_s", step_time, step);
  // This step's throughput; the run's mean is summary/samples_per_s (results.csv's samples_per_s).
  events_->add_scalar("perf/step_samples_per_s", static_cast<double>(e_.train.global_batch_size) / step_time, step);
  const double tflops = achieved_tflops(r_.model->flops_per_sample(),
                                        static_cast<double>(e_.train.global_batch_size) / step_time / devices_);
  if (r_.model->flops_per_sample() > 0) events_->add_scalar("perf/tflops_per_device", tflops, step);
  if (mfu_peak_.peak && r_.model->flops_per_sample() > 0) events_->add_scalar("perf/mfu", tflops / mfu_peak_.peak->tflops, step);
  {
    const auto b = breakdown_->take_interval();
    events_->add_scalar("perf/time_data_s", b.data, step);
    events_->add_scalar("perf/time_compute_s", b.compute, step);
    events_->add_scalar("perf/time_comm_wait_s", b.comm_wait, step);
    events_->add_scalar("perf/time_optimizer_s", b.optimizer, step);
  }
  memory_.log(*r_.strategy, *events_, step);
  const auto c = comm_.counters(CommPhase::kTrain);
  const auto here = static_cast<double>(step - start_step_);  // the counters are this process's
  events_->add_scalar("comm/payload_bytes_per_step", static_cast<double>(c.payload_bytes) / here, step);
  events_->add_scalar("comm/bus_bytes_per_step", c.bus_bytes / here, step);
  events_->add_scalar("comm/calls_per_step", static_cast<double>(c.calls) / here, step);
  events_->flush();
}

void Loop::log_eval(std::int64_t step) {
  if (!events_) return;
  events_->add_scalar("eval/loss", last_eval_->loss, step);
  for (const auto& [name, value] : last_eval_->metrics) events_->add_scalar("eval/" + name, value, step);
  events_->flush();
}

void Loop::log_checkpoint(std::int64_t step, const ckpt::SaveResult& saved) {
  if (!events_) return;
  events_->add_scalar("checkpoint/save_time_s", saved.seconds, step);
  if (saved.max_rank_bytes > 0)  // unknown yet for an asynchronous save
    events_->add_scalar("checkpoint/bytes_per_rank", static_cast<double>(saved.max_rank_bytes), step);
  events_->flush();
}

void Loop::end_events(bool ok) {
  if (!events_) return;
  events_->end_hparams_session(ok);
  if (ok) events_->flush();
}

}  // namespace strata::trainer
