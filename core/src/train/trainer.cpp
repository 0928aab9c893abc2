// The training loop (train/loop.hpp): setup, micro-batches through the strategy and the step,
// the figures read at log steps (and the stop at a non-finite one), periodic evaluation,
// checkpoints and the trainer state they carry, the final model, and the end of the run. Its
// summary.json, TensorBoard output and verdict are in train/run_summary.cpp, train/step_log.cpp
// and train/verdict_writer.cpp.

#include "train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <optional>
#include <stdexcept>
#include <string>
#include <typeinfo>

#include <ATen/record_function.h>
#include <fmt/format.h>

#include "strata/errors.hpp"
#include "strata/registry.hpp"
#include "text/errors_text.hpp"
#include "train/saved_model.hpp"
#include "train/loop.hpp"
#include "train/replicas.hpp"

namespace strata {

namespace trainer {

namespace {
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// "strategy 'ddp' (plugin library PATH)", or "(built in)".
std::string plugin_named(const RankRun& r, PluginKind kind, const std::string& name) {
  const RegistryEntry* entry = r.registry.find(kind, name);
  return fmt::format("{} '{}' ({})", kind_name(kind), name,
                     entry != nullptr && !entry->library.empty() ? "plugin library " + entry->library : "built in");
}

/// A call into a plugin: which one, in which phase ("in its setup"), and the model it runs, if any.
struct PluginSite {
  const RankRun& run;
  PluginKind kind;
  const std::string& name;
  const char* phase;
  const std::string* model = nullptr;
};

/// Runs `call`, plugin code; what it throws that is not one of Strata's own errors (a c10::Error, a
/// std::exception; a plain strata::Error too, where `plain` says only the plugin's code throws one)
/// is rethrown naming the plugin, its library and the phase, at `step` when there is one (> 0).
template <typename F>
decltype(auto) plugin_call(const PluginSite& site, std::int64_t step, bool plain, F&& call) {
  const auto rethrow = [&](const std::exception& e, std::string fix) {
    std::string message = plugin_named(site.run, site.kind, site.name) + " failed " + site.phase;
    if (site.model != nullptr) message += " (running " + plugin_named(site.run, PluginKind::kModel, *site.model) + ")";
    message += ": " + detail::exception_text(e);
    if (fix.empty())
      fix = "The error is the plugin's: check its options (`strata describe " + site.name +
            "`), or report it to its authors.";
    if (step > 0) throw TrainingError(step, message, fix);
    throw Error(message, fix);
  };
  try {
    return call();
  } catch (const Error& e) {
    if (!plain || typeid(e) != typeid(Error)) throw;  // ConfigError, DistributedError, Interrupted, ...
    rethrow(e, e.fix());
  } catch (const std::exception& e) {
    rethrow(e, {});
  }
  throw std::logic_error("unreachable");
}
}  // namespace

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
  // Test hook: STRATA_FAULT=slow-compute:SECONDS makes each micro-batch's compute take that much
  // longer on the host (a machine slowed by a competing process, as `strata estimate` meets it).
  if (const char* fault = std::getenv("STRATA_FAULT")) {
    double seconds = 0;
    if (std::sscanf(fault, "slow-compute:%lf", &seconds) == 1 && seconds > 0)
      slow_compute_ = std::chrono::duration<double>(seconds);
  }
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
  plugin_call({r_, PluginKind::kStrategy, e_.strategy.name, "in its setup"}, 0, true,
              [&] { r_.strategy->setup(setup); });
  checkpoints_.emplace(e_, *r_.strategy, comm_, log_, r_.place.run_dir,
                       e_.checkpoint.every > 0 || e_.checkpoint.at_end || r_.place.resume.has_value(), r_.barrier);
  if (r_.place.resume) restore(checkpoints_->load(*r_.place.resume));
  trace_.emplace(t.trace_steps, start_step_, r_.device, r_.place.run_dir, comm_.rank());
  comm_.set_phase(CommPhase::kTrain);
  if (const auto* multi = dynamic_cast<const MultiDevice*>(r_.strategy.get()))
    devices_ = comm_.world_size() * multi->devices_per_rank();
  else
    devices_ = comm_.world_size();

  open_events();
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

void Loop::train_step(std::int64_t step) {
  const auto& t = e_.train;
  RECORD_USER_SCOPE(fmt::format("strata step {}", step + 1));  // named only while a profiler records
  const double lr = schedule_.at(step);
  stats_->begin_step();
  // The step's loss is the mean over the global batch's target elements: this rank's summed
  // losses times loss_scale here, averaged over ranks when it is read. It stays on the device,
  // like the gradient norm: nothing in the step waits for the device.
  std::vector<Batch> ahead;  // the step's micro-batches, when their targets must be counted first
  const auto next_batch = [&](std::int64_t m) {
    return plugin_call({r_, PluginKind::kDataset, e_.dataset.name, "in the step (reading its batches)"}, step + 1, true,
                       [&] { return batches_->next(step, m); });
  };
  torch::Tensor scale = fixed_scale_;
  if (!scale.defined()) {
    breakdown_->begin(StepBreakdown::kData);
    for (std::int64_t m = 0; m < t.micro_batches; ++m) ahead.push_back(next_batch(m));
    scale = loss_scale(ahead);
    breakdown_->end();
  }
  torch::Tensor loss;
  for (std::int64_t m = 0; m < t.micro_batches; ++m) {
    breakdown_->begin(StepBreakdown::kData);
    Batch batch = ahead.empty() ? next_batch(m) : std::move(ahead[static_cast<std::size_t>(m)]);
    breakdown_->end();
    breakdown_->begin(StepBreakdown::kCompute);
    RECORD_USER_SCOPE(fmt::format("strata micro-batch {}", m));
    torch::Tensor l = plugin_call(
        {r_, PluginKind::kStrategy, e_.strategy.name, "in the step (forward and backward)", &e_.model.name}, step + 1,
        true, [&] {
          return r_.strategy->forward_backward(batch,
                                               {static_cast<int>(m), static_cast<int>(t.micro_batches), scale});
        });
    loss = loss.defined() ? loss + l : l;
    if (slow_compute_.count() > 0) std::this_thread::sleep_for(slow_compute_);
    breakdown_->end();
  }
  breakdown_->begin(StepBreakdown::kOptimizer);
  const std::int64_t step1 = step + 1;
  const bool logged = log_step(step1);
  // The gradient norm costs a pass over every gradient (and a collective when sharded): only
  // for clipping and at log steps, where it is reported. A non-finite gradient between log
  // steps still stops the run, at the next step's loss.
  const double clip = t.clip_grad_norm > 0 || logged ? t.clip_grad_norm : Strategy::kNormNotNeeded;
  torch::Tensor grad_norm;
  {
    RECORD_USER_SCOPE("strata optimizer");
    plugin_call({r_, PluginKind::kStrategy, e_.strategy.name, "in the step (the optimizer step)"}, step1, true, [&] {
      grad_norm = r_.strategy->finish_gradients(clip);
      r_.strategy->step(lr);
    });
  }
  breakdown_->end();
  breakdown_->end_step();
  stats_->end_step(step1, loss * scale, grad_norm);

  if (logged) read_steps(lr);
  const double elapsed = seconds_since(started_);
  const std::int64_t here = step1 - start_step_;  // steps of this process
  const double samples_per_s = static_cast<double>(here * t.global_batch_size) / std::max(1e-9, elapsed);
  const double eta = elapsed / static_cast<double>(here) * static_cast<double>(t.steps - step1);
  progress_.update(step1, last_loss_, steps_done_, lr, samples_per_s, eta, logged);
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
    if (!(trace_ && trace_->traced(row.step))) step_times_.push_back(row.time_s);  // the profiler slows a traced step
    train_time_s_ += row.time_s;
    last_loss_ = row.loss;
    if (row.has_grad_norm) last_grad_norm_ = row.grad_norm;
    steps_done_ = row.step;
  }
  if (rows.empty() || !log_point) return;
  loss_curve_.emplace_back(rows.back().step, rows.back().loss);
  log_scalars(rows.back(), lr);
}

EvalResult Loop::evaluate() {
  const std::int64_t batch = e_.eval.batch_size > 0 ? e_.eval.batch_size : e_.train.global_batch_size;
  return plugin_call({r_, PluginKind::kStrategy, e_.strategy.name, "in evaluation", &e_.model.name}, 0, false,
                     [&] { return strata::evaluate(*r_.strategy, *r_.dataset, comm_, r_.device, {e_.eval.batches, batch}); });
}

/// Saves a checkpoint after `step` steps (collective), with every figure up to it read first.
void Loop::save_checkpoint(std::int64_t step) {
  read_steps(schedule_.at(step - 1), /*log_point=*/false);
  memory_.measure(*r_.strategy, comm_);  // the segment's memory so far, for trainer.json (collective)
  comm_.set_phase(CommPhase::kEval);
  // Strata's own errors (a full disk) pass unchanged; anything else came from the strategy's state.
  const auto saved = plugin_call({r_, PluginKind::kStrategy, e_.strategy.name, "in the checkpoint"}, step, false,
                                 [&] { return checkpoints_->save(step, trainer_state()); });
  comm_.set_phase(CommPhase::kTrain);
  log_checkpoint(step, saved);
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

/// Gathers the full model on rank 0 (a collective of every rank) and writes it for init_from.
void Loop::save_final_model(Json& summary) {
  comm_.set_phase(CommPhase::kEval);
  const StateDict state = plugin_call({r_, PluginKind::kStrategy, e_.strategy.name, "gathering the final model"}, 0,
                                      false, [&] { return r_.strategy->full_state_dict(); });
  comm_.set_phase(CommPhase::kTrain);
  if (!rank0_) return;
  const SavedModel saved = write_final_model(*r_.model, state, r_.place.run_dir, e_.train.save_format);
  summary["final_model"] = saved.name;
  log_.info(fmt::format("final model: {} ({} tensors{})", (r_.place.run_dir / saved.name).string(), state.size(), saved.note));
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
      const std::int64_t step1 = step + 1;
      trace_->before_step(step1);
      {
        const SyncAudit::Window audited(audit_, !log_step(step1));
        train_step(step);
      }
      if (const auto traced = trace_->after_step(step1); !traced.empty()) log_.info(traced);
      if (e_.eval.every > 0 && step1 % e_.eval.every == 0 && step1 != t.steps) {
        note_phase("eval");
        last_eval_ = evaluate();
        note_phase("train");
        log_eval(step1);
        progress_.line(fmt::format("eval at step {}: {}", step1, last_eval_->describe()));
      }
      checkpoints_->poll();  // an asynchronous save the writer finished: logged (or its error thrown) here
      if (checkpoints_->due(step1)) {
        note_phase("checkpoint");  // rank 0's commit is waited for through the store, not watched
        save_checkpoint(step1);
        note_phase("train");
      }
    }
    plugin_call({r_, PluginKind::kStrategy, e_.strategy.name, "finishing its training"}, t.steps, true,
                [&] { r_.strategy->finish_training(); });
    progress_.finish();
    note_phase("eval");
    memory_.measure(*r_.strategy, comm_);  // before evaluation: the training peak, not evaluation's
    last_eval_ = evaluate();
    note_phase("checkpoint");
    checkpoints_->finish();  // the save still in flight, committed before the run says it is done
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
  end_events(true);
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

}  // namespace trainer

Json train(RankRun& run) { return trainer::Loop(run).run(); }

}  // namespace strata
