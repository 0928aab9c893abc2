#include "train/trainer.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>

#include <fmt/format.h>

#include "data/sampler.hpp"
#include "dist/job_monitor.hpp"
#include "launch/verdict.hpp"
#include "text/errors_text.hpp"
#include "io/build_info.hpp"
#include "io/run_dir.hpp"
#include "strata/errors.hpp"
#include "tensorboard/event_writer.hpp"
#include "tensorboard/hparams.hpp"
#include "train/batches.hpp"
#include "train/checkpoint.hpp"
#include "train/checkpointing.hpp"
#include "train/evaluation.hpp"
#include "train/flops.hpp"
#include "train/median.hpp"
#include "train/progress.hpp"
#include "train/replicas.hpp"
#include "train/run_memory.hpp"
#include "train/schedule.hpp"
#include "train/step_breakdown.hpp"
#include "train/step_stats.hpp"
#include "train/sync_audit.hpp"

namespace strata {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

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
  void log_eval(std::int64_t step);
  void log_scalars(const StepStats::Row& row, double lr);
  Json summary(const std::string& status, const std::string& error) const;
  /// This process's part of the run (a resumed run has one per process that trained it): its
  /// strategy, world, steps, times, memory and traffic.
  Json segment() const;
  void write_summary(const Json& summary) const;
  void save_final_model(Json& summary);
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
  LrSchedule schedule_;
  DataSpec data_;
  torch::Tensor fixed_scale_;  // loss_scale when every sample has the same number of targets
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

/// Gathers the full model on rank 0 (a collective of every rank) and writes it for init_from.
void Loop::save_final_model(Json& summary) {
  comm_.set_phase(CommPhase::kEval);
  const StateDict state = r_.strategy->full_state_dict();
  comm_.set_phase(CommPhase::kTrain);
  if (!rank0_) return;
  const SavedModel saved = write_final_model(*r_.model, state, r_.place.run_dir, e_.train.save_format);
  summary["final_model"] = saved.name;
  log_.info(fmt::format("final model: {} ({} tensors{})", (r_.place.run_dir / saved.name).string(), state.size(), saved.note));
}

void Loop::setup() {
  const auto& t = e_.train;
  sampler_.emplace(SamplerOptions{r_.dataset->size(Split::kTrain), t.global_batch_size, t.micro_batches,
                                  comm_.world_size(), comm_.rank(), static_cast<std::uint64_t>(t.seed)});
  batches_.emplace(*r_.dataset, *sampler_, BatchLoaderOptions{r_.device, t.steps, t.micro_batches});
  stats_.emplace(r_.device, comm_, t.sync_timing);
  breakdown_.emplace(comm_, r_.device);
  mfu_peak_ = resolve_mfu_peak(e_, r_.device, e_.precision.param_dtype);
  audit_ = SyncAudit(t.sync_audit, r_.device);
  if (audit_.enabled()) log_.info("sync audit: a host sync between log steps is an error");
  if (t.sync_audit && !audit_.enabled()) log_.info("sync audit: nothing to audit on the CPU");
  data_ = r_.dataset->spec();
  if (!data_.ignored_targets)
    fixed_scale_ = torch::tensor(static_cast<double>(comm_.world_size()) /
                                     static_cast<double>(t.global_batch_size * data_.targets_per_sample),
                                 torch::TensorOptions().dtype(torch::kFloat32).device(r_.device));
  // A warmup longer than the run is clamped here, not in the config: the experiment keeps the
  // value as written, so a resume with more steps compares equal.
  schedule_ = {e_.optimizer.lr, t.steps, std::min(t.warmup_steps, t.steps), t.lr_schedule == "cosine", t.min_lr_ratio};
  model_params_ = r_.model->parameter_count();
  model_tensors_ = static_cast<std::int64_t>(r_.model->parameters().size());

  // prepare() loaded [train] init_from into the model (not for a resumed run, whose values come
  // from its checkpoint), before anything was written.
  if (!r_.init_loaded.empty()) log_.info(r_.init_loaded);
  if (!r_.init_skipped.empty()) log_.warn("init_partial: " + r_.init_skipped);
  const StrategySetup setup = r_.strategy_setup();
  log_.info("precision: " + setup.precision.describe());
  comm_.set_phase(CommPhase::kSetup);
  r_.strategy->setup(setup);
  checkpoints_.emplace(e_, *r_.strategy, comm_, log_, r_.place.run_dir,
                       e_.checkpoint.every > 0 || e_.checkpoint.at_end || r_.place.resume.has_value(), r_.barrier);
  if (r_.place.resume) restore(checkpoints_->load(*r_.place.resume));
  comm_.set_phase(CommPhase::kTrain);
  if (const auto* multi = dynamic_cast<const MultiDevice*>(r_.strategy.get()))
    devices_ = comm_.world_size() * multi->devices_per_rank();
  else
    devices_ = comm_.world_size();

  if (rank0_) {
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
  log_.info(fmt::format(
      "strata: {} | model {} ({} parameters, {} units) | dataset {} ({} train / {} eval) | strategy {} | "
      "world {} | device {} | {} steps x {} examples{} | {} lr {:g} | out {}",
      e_.experiment.name, e_.model.name, model_params_, r_.model->units().size(), e_.dataset.name,
      r_.dataset->size(Split::kTrain), r_.dataset->size(Split::kEval), e_.strategy.name, comm_.world_size(),
      r_.device.str(), t.steps, t.global_batch_size,
      t.micro_batches > 1 ? fmt::format(" in {} micro-batches", t.micro_batches) : std::string(), e_.optimizer.name,
      e_.optimizer.lr,
      r_.place.run_dir.string()));
  if (r_.model->flops_per_sample() > 0)
    log_.info(fmt::format("flops: {:.4g} per sample = {}; MFU against {}", static_cast<double>(r_.model->flops_per_sample()),
                             r_.model->flops_formula().empty() ? "the model's count" : r_.model->flops_formula(),
                             mfu_peak_.peak ? fmt::format("{:g} TFLOP/s per device ({})", mfu_peak_.peak->tflops,
                                                          mfu_peak_.peak->source)
                                            : "nothing: " + mfu_peak_.note));
  register_verdict();
}

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
    if (events_) events_->end_hparams_session(false);
  });
}

/// summary.json with the verdict (rank 0); a rank that lost rank 0 writes its own
/// summary_rank<r>.json, since rank 0 cannot.
void Loop::write_verdict(Json s, const FailureRecord& verdict) const {
  s["status"] = verdict.status;
  s["error"] = verdict.error;
  s["failed_rank"] = verdict.cause_rank ? Json(*verdict.cause_rank) : Json();
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
    if (events_) events_->end_hparams_session(false);
  } catch (const std::exception& e) {
    log_.warn(std::string("could not write the failed run's summary: ") + e.what());
  }
}

void Loop::train_step(std::int64_t step) {
  const auto& t = e_.train;
  const double lr = schedule_.at(step);
  stats_->begin_step();
  // The step's loss is the mean over the global batch's target elements: this rank's summed
  // losses times loss_scale here, averaged over ranks when it is read. It stays on the device,
  // like the gradient norm: nothing in the step waits for the device.
  std::vector<Batch> ahead;  // the step's micro-batches, when their targets must be counted first
  torch::Tensor scale = fixed_scale_;
  if (!scale.defined()) {
    breakdown_->begin(StepBreakdown::kData);
    for (std::int64_t m = 0; m < t.micro_batches; ++m) ahead.push_back(batches_->next(step, m));
    scale = loss_scale(ahead);
    breakdown_->end();
  }
  torch::Tensor loss;
  for (std::int64_t m = 0; m < t.micro_batches; ++m) {
    breakdown_->begin(StepBreakdown::kData);
    Batch batch = ahead.empty() ? batches_->next(step, m) : std::move(ahead[static_cast<std::size_t>(m)]);
    breakdown_->end();
    breakdown_->begin(StepBreakdown::kCompute);
    torch::Tensor l = r_.strategy->forward_backward(
        batch, {static_cast<int>(m), static_cast<int>(t.micro_batches), scale});
    loss = loss.defined() ? loss + l : l;
    breakdown_->end();
  }
  breakdown_->begin(StepBreakdown::kOptimizer);
  const std::int64_t step1 = step + 1;
  const bool logged = log_step(step1);
  // The gradient norm costs a pass over every gradient (and a collective when sharded): only
  // for clipping and at log steps, where it is reported. A non-finite gradient between log
  // steps still stops the run, at the next step's loss.
  const double clip = t.clip_grad_norm > 0 || logged ? t.clip_grad_norm : Strategy::kNormNotNeeded;
  const torch::Tensor grad_norm = r_.strategy->finish_gradients(clip);
  r_.strategy->step(lr);
  breakdown_->end();
  breakdown_->end_step();
  stats_->end_step(step1, loss * scale, grad_norm);

  if (logged) read_steps(lr);
  const double elapsed = seconds_since(started_);
  const std::int64_t here = step1 - start_step_;  // steps of this process
  const double samples_per_s = static_cast<double>(here * t.global_batch_size) / std::max(1e-9, elapsed);
  const double eta = elapsed / static_cast<double>(here) * static_cast<double>(t.steps - step1);
  progress_.update(step1, last_loss_, lr, samples_per_s, eta, logged);
}

/// world size / target elements of the global batch, on the device: this rank's micro-batches
/// counted, summed over ranks (one 8-byte all-reduce, no host sync).
torch::Tensor Loop::loss_scale(const std::vector<Batch>& batches) {
  torch::Tensor count;
  for (const auto& b : batches) count = count.defined() ? count + b.target_count() : b.target_count();
  count = count.to(comm_.device());
  if (!comm_.skips_collectives()) comm_.all_reduce(count, ReduceOp::kSum);
  return (static_cast<double>(comm_.world_size()) / count.clamp_min(1.0)).to(torch::kFloat32);
}

/// Reads the figures of the steps since the last log step (the one host sync of a log interval)
/// and stops the run at the first non-finite loss or gradient norm, naming its step.
void Loop::read_steps(double lr, bool log_point) {
  const auto rows = stats_->read();
  for (const auto& row : rows) {
    if (!std::isfinite(row.loss))
      throw TrainingError(row.step, fmt::format("the training loss is {} at step {}.", row.loss, row.step),
                          "Lower optimizer.lr, add warmup (train.warmup_steps) or gradient clipping "
                          "(train.clip_grad_norm).");
    if (row.has_grad_norm && !std::isfinite(row.grad_norm))
      throw TrainingError(row.step, fmt::format("the gradient norm is {} at step {}.", row.grad_norm, row.step),
                          "Lower optimizer.lr or set train.clip_grad_norm.");
    step_times_.push_back(row.time_s);
    train_time_s_ += row.time_s;
    last_loss_ = row.loss;
    if (row.has_grad_norm) last_grad_norm_ = row.grad_norm;
    steps_done_ = row.step;
  }
  if (rows.empty() || !log_point) return;
  loss_curve_.emplace_back(rows.back().step, rows.back().loss);
  log_scalars(rows.back(), lr);
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

EvalResult Loop::evaluate() {
  const std::int64_t batch = e_.eval.batch_size > 0 ? e_.eval.batch_size : e_.train.global_batch_size;
  return strata::evaluate(*r_.strategy, *r_.dataset, comm_, r_.device, {e_.eval.batches, batch});
}

Json Loop::summary(const std::string& status, const std::string& error) const {
  const auto& t = e_.train;
  const auto setup = comm_.counters(CommPhase::kSetup);
  const auto eval = comm_.counters(CommPhase::kEval);
  const Json current = segment();
  Json s = Json::object();
  s["status"] = status;
  if (!error.empty()) s["error"] = error;
  s["experiment"] = e_.experiment.name;
  for (const char* key : {"strategy", "world_size", "devices", "backend", "device"}) s[key] = *current.find(key);
  s["model"] = e_.model.name;
  s["dataset"] = e_.dataset.name;
  s["steps"] = steps_done_;
  s["global_batch_size"] = t.global_batch_size;
  s["micro_batches"] = t.micro_batches;
  s["seed"] = t.seed;
  s["parameters"] = model_params_;
  s["parameter_tensors"] = model_tensors_;
  s["flops_per_sample"] = r_.model->flops_per_sample();
  // The run's figures are its last segment's (this process's): never a blend of two strategies.
  for (const char* key : {"train_time_s", "step_time_s", "samples_per_s", "timing_warmup_steps", "steady_step_time_s",
                          "steady_samples_per_s"})
    s[key] = *current.find(key);
  const double step_time = current.find("step_time_s")->number_or(0);
  s["flops"] = flops_summary(r_.model->flops_per_sample(), r_.model->flops_formula(),
                             step_time > 0 ? static_cast<double>(t.global_batch_size) / step_time / devices_ : 0.0,
                             mfu_peak_);
  if (breakdown_) {
    const auto b = breakdown_->total(/*wait_for_device=*/status == "ok");
    Json& d = s["time_breakdown_s"];
    d = Json::object();
    d["data"] = b.data;
    d["compute"] = b.compute;
    d["comm_wait"] = b.comm_wait;
    d["optimizer"] = b.optimizer;
  } else {
    s["time_breakdown_s"] = Json();  // before the loop was set up
  }
  s["time_breakdown_timing"] = breakdown_ ? Json(breakdown_->clock()) : Json();
  s["step_timing"] = !r_.device.is_cuda() ? "host clock" : (t.sync_timing ? "synchronized host clock" : "cuda events");
  s["final_loss"] = last_loss_;
  s["final_grad_norm"] = last_grad_norm_;  // global, before clipping, of the last step
  Json& ev = s["eval"];
  ev = Json::object();
  ev["loss"] = last_eval_ ? Json(last_eval_->loss) : Json();
  ev["accuracy"] = Json();  // every model reports it, but a custom one may not
  if (last_eval_)
    for (const auto& [name, value] : last_eval_->metrics) ev[name] = value;
  ev["examples"] = last_eval_ ? Json(last_eval_->examples) : Json();
  s["param_norm"] = Json();  // filled by the caller (needs a collective on every rank)
  s["memory"] = *current.find("memory");
  s["comm"] = *current.find("comm");
  Json& comm = s["comm"];
  comm["setup_bytes"] = setup.payload_bytes;
  comm["eval_bytes"] = eval.payload_bytes;
  Json curve = Json::array();
  for (const auto& [step, loss] : loss_curve_) curve.push_back(Json::Array{Json(step), Json(loss)});
  s["loss_curve"] = curve;
  Json segments = earlier_segments_;
  segments.push_back(current);
  s["segments"] = segments;
  s["restarts"] = r_.place.restarts;
  s["checkpoint"] = checkpoints_ ? checkpoints_->summary() : Json();
  s["versions"] = versions_json();  // strata, commit, LibTorch, CUDA, NCCL (as `strata --version`)
  s["host"] = host_name();
  return s;
}

Json Loop::segment() const {
  const auto train = comm_.counters(CommPhase::kTrain);
  const std::int64_t steps = steps_done_ - start_step_;
  const double per_step = std::max<double>(1.0, static_cast<double>(steps));
  Json s = Json::object();
  s["strategy"] = e_.strategy.name;
  s["world_size"] = comm_.world_size();
  s["devices"] = devices_;
  s["backend"] = r_.backend;
  s["device"] = r_.device.str();
  s["from_step"] = start_step_;
  s["to_step"] = steps_done_;
  s["steps"] = steps;
  s["train_time_s"] = train_time_s_;
  s["step_time_s"] = step_times_.empty() ? 0.0 : median(step_times_);
  s["samples_per_s"] =
      train_time_s_ > 0 ? static_cast<double>(steps * e_.train.global_batch_size) / train_time_s_ : 0.0;
  // The steady state: the median step after the segment's first steps (allocator warm-up, cold
  // caches), what comparisons use; train_time_s and samples_per_s keep every step.
  const auto warm = std::min<std::size_t>(static_cast<std::size_t>(e_.train.timing_warmup_steps), step_times_.size() / 2);
  const std::vector<double> steady(step_times_.begin() + static_cast<std::ptrdiff_t>(warm), step_times_.end());
  const double steady_step = steady.empty() ? 0.0 : median(steady);
  s["timing_warmup_steps"] = static_cast<std::int64_t>(warm);
  s["steady_step_time_s"] = steady_step;
  s["steady_samples_per_s"] = steady_step > 0 ? static_cast<double>(e_.train.global_batch_size) / steady_step : 0.0;
  memory_.write(s["memory"]);
  Json& comm = s["comm"];
  comm = Json::object();
  comm["payload_bytes_per_step"] = static_cast<double>(train.payload_bytes) / per_step;
  comm["bus_bytes_per_step"] = train.bus_bytes / per_step;
  comm["calls_per_step"] = static_cast<double>(train.calls) / per_step;
  comm["time_s"] = train.time_s;
  return s;
}

void Loop::write_summary(const Json& summary) const {
  if (events_) tb::add_summary_scalars(*events_, summary, steps_done_);  // the figures TensorBoard shows as metrics
  if (rank0_) write_text_file(r_.place.run_dir / "summary.json", summary.dump() + "\n");
}

/// Saves a checkpoint after `step` steps (collective), with every figure up to it read first.
void Loop::save_checkpoint(std::int64_t step) {
  read_steps(schedule_.at(step - 1), /*log_point=*/false);
  memory_.measure(*r_.strategy, comm_);  // the segment's memory so far, for trainer.json (collective)
  comm_.set_phase(CommPhase::kEval);
  const auto saved = checkpoints_->save(step, trainer_state());
  comm_.set_phase(CommPhase::kTrain);
  if (!events_) return;
  events_->add_scalar("checkpoint/save_time_s", saved.seconds, step);
  events_->add_scalar("checkpoint/bytes_per_rank", static_cast<double>(saved.max_rank_bytes), step);
  events_->flush();
}

/// What the loop needs to continue where it stopped (rank 0 saves it as trainer.json). The data
/// position follows from the step: the sampler's order depends only on the seed and the epoch.
Json Loop::trainer_state() const {
  Json s = Json::object();
  s["step"] = steps_done_;
  s["epoch"] = steps_done_ / sampler_->steps_per_epoch();
  s["samples"] = steps_done_ * e_.train.global_batch_size;
  s["lr"] = steps_done_ > 0 ? schedule_.at(steps_done_ - 1) : 0.0;
  s["train_time_s"] = train_time_s_;  // this segment's
  Json segments = earlier_segments_;
  segments.push_back(segment());
  s["segments"] = segments;
  s["last_loss"] = last_loss_;
  s["last_grad_norm"] = last_grad_norm_;
  Json curve = Json::array();
  for (const auto& [step, loss] : loss_curve_) curve.push_back(Json::Array{Json(step), Json(loss)});
  s["loss_curve"] = curve;
  s["restarts"] = r_.place.restarts;
  s["data"] = data_spec_json(data_);  // to rebuild the model without the dataset (strata export)
  s["config_dir"] = std::filesystem::absolute(e_.directory()).lexically_normal().string();
  return s;
}

void Loop::restore(const Resumed& r) {
  const Json& t = r.trainer;
  const auto number = [&](const char* key) { return t.find(key) ? t.find(key)->number_or(NAN) : NAN; };
  start_step_ = steps_done_ = r.step;
  train_time_s_ = 0;  // this segment's: the earlier ones keep theirs
  earlier_segments_ = Json::array();
  if (const Json* segments = t.find("segments"); segments != nullptr && segments->elements() != nullptr) {
    for (const auto& seg : *segments->elements()) earlier_segments_.push_back(seg);
  } else {  // a checkpoint from before segments: what it knew of them, as one
    Json seg = Json::object();
    seg["from_step"] = 0;
    seg["to_step"] = r.step;
    seg["steps"] = r.step;
    seg["train_time_s"] = number("train_time_s");
    earlier_segments_.push_back(seg);
  }
  last_loss_ = number("last_loss");
  last_grad_norm_ = number("last_grad_norm");
  loss_curve_.clear();
  if (const Json* curve = t.find("loss_curve"); curve && curve->elements())
    for (const auto& point : *curve->elements())
      loss_curve_.emplace_back(static_cast<std::int64_t>((*point.elements())[0].number_or(0)),
                               (*point.elements())[1].number_or(NAN));
}

Json Loop::run() {
  const auto& t = e_.train;
  Json s;
  try {
    setup();
    memory_.end_setup();
    note_phase("train");
    started_ = Clock::now();
    for (std::int64_t step = start_step_; step < t.steps; ++step) {
      if (r_.monitor != nullptr) {
        // Stop between steps, where nothing is in flight: every rank got the signal (a launcher
        // forwards it), and one that is a step ahead finds its peers gone and stops too.
        if (const int sig = r_.monitor->stop_signal()) throw Interrupted(sig, fmt::format("before step {}", step + 1));
        r_.monitor->note_step(step);
      }
      {
        const SyncAudit::Window audited(audit_, !log_step(step + 1));
        train_step(step);
      }
      const std::int64_t step1 = step + 1;
      if (e_.eval.every > 0 && step1 % e_.eval.every == 0 && step1 != t.steps) {
        note_phase("eval");
        last_eval_ = evaluate();
        note_phase("train");
        log_eval(step1);
        progress_.line(fmt::format("eval at step {}: {}", step1, last_eval_->describe()));
      }
      if (checkpoints_->due(step1)) {
        note_phase("checkpoint");  // rank 0's commit is waited for through the store, not watched
        save_checkpoint(step1);
        note_phase("train");
      }
    }
    progress_.finish();
    note_phase("eval");
    memory_.measure(*r_.strategy, comm_);  // before evaluation: the training peak, not evaluation's
    last_eval_ = evaluate();
    s = summary("ok", "");
    s["param_norm"] = r_.strategy->parameter_norm();
    check_replicas(*r_.strategy, comm_, log_, s);
    note_phase("checkpoint");
    if (t.save_final) save_final_model(s);
  } catch (const std::exception& error) {
    fail(error);
    throw;
  }
  if (r_.monitor != nullptr) r_.monitor->set_verdict_writer(nullptr);
  log_eval(t.steps);
  if (events_) {
    events_->end_hparams_session(true);
    events_->flush();
  }
  write_summary(s);
  log_.info(fmt::format("done: {} steps in {:.1f} s ({:.0f} samples/s)  final loss {:.4f}  eval {}",
                           steps_done_ - start_step_, train_time_s_,
                           static_cast<double>((steps_done_ - start_step_) * t.global_batch_size) /
                               std::max(1e-9, train_time_s_),
                           last_loss_, last_eval_->describe()));
  log_.info("outputs: " + r_.place.run_dir.string() + "  (tensorboard --logdir " +
               (r_.place.run_dir.has_parent_path() ? r_.place.run_dir.parent_path().string() : std::string(".")) +
               ")");
  return s;
}

}  // namespace

Json train(RankRun& run) { return Loop(run).run(); }

}  // namespace strata
