// summary.json of the training loop (train/loop.hpp): the run's summary (docs/user-guide.md keys) as of
// now, for a run that ended, failed or is stuck (the verdict's base), this process's segment of
// the run (also carried by the trainer state of a checkpoint), and writing the summary: the
// summary/* scalars TensorBoard shows as metrics, and rank 0's summary.json.

#include <algorithm>
#include <cstddef>
#include <string>
#include <thread>
#include <vector>

#include <ATen/Parallel.h>

#include "io/build_info.hpp"
#include "io/run_dir.hpp"
#include "tensorboard/hparams.hpp"
#include "train/loop.hpp"
#include "train/median.hpp"

namespace strata::trainer {

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
  {  // one example's input shape ([T] for tokens): what a memory profile's activations were measured at
    Json shape = Json::array();
    for (const auto d : r_.dataset->spec().input_shape) shape.push_back(d);
    s["sample_shape"] = std::move(shape);
  }
  s["steps"] = steps_done_;
  s["global_batch_size"] = t.global_batch_size;
  s["micro_batches"] = t.micro_batches;
  s["seed"] = t.seed;
  s["parameters"] = model_params_;
  s["parameter_tensors"] = model_tensors_;
  s["flops_per_sample"] = r_.model->flops_per_sample();
  // The run's figures are its last segment's (this process's): never a blend of two strategies.
  for (const char* key : {"train_time_s", "step_time_s", "samples_per_s", "timing_warmup_steps", "steady_step_time_s",
                          "steady_step_time_quartiles_s", "steady_samples_per_s"})
    s[key] = *current.find(key);
  const double step_time = current.find("step_time_s")->number_or(0);
  s["flops"] = flops_summary(r_.model->flops_per_sample(), r_.model->flops_formula(),
                             step_time > 0 ? static_cast<double>(t.global_batch_size) / step_time / devices_ : 0.0,
                             mfu_peak_);
  if (breakdown_) {
    const auto phases = [](const StepBreakdown::Seconds& b) {
      Json d = Json::object();
      d["data"] = b.data;
      d["compute"] = b.compute;
      d["comm_wait"] = b.comm_wait;
      d["optimizer"] = b.optimizer;
      return d;
    };
    s["time_breakdown_s"] = phases(breakdown_->total(/*wait_for_device=*/status == "ok"));
    // The steady step's phases: each phase's median over the steps steady_step_time_s covers.
    const auto warm = static_cast<std::int64_t>(current.find("timing_warmup_steps")->number_or(0));
    s["time_breakdown_steady_s"] = phases(breakdown_->steady(warm, /*wait_for_device=*/status == "ok"));
  } else {
    s["time_breakdown_s"] = Json();  // before the loop was set up
    s["time_breakdown_steady_s"] = Json();
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
  // The traced steps and rank 0's file, where [train] trace_steps asked for a trace.
  if (Json trace = trace_ ? trace_->describe() : Json(); !trace.is_null()) s["trace"] = std::move(trace);
  s["versions"] = versions_json();  // strata, commit, LibTorch, CUDA, NCCL (as `strata --version`)
  s["host"] = host_name();
  // What a rank computes with on the CPU, and what the host has: how `strata estimate` shares a
  // host's cores among the ranks it places there.
  s["threads"] = static_cast<std::int64_t>(at::get_num_threads());
  s["host_threads"] = static_cast<std::int64_t>(std::thread::hardware_concurrency());
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
  // How much the steady steps vary: what a prediction made from this run inherits.
  Json quartiles = Json::array();
  for (const double q : {0.25, 0.75}) quartiles.push_back(steady.empty() ? 0.0 : quantile(steady, q));
  s["steady_step_time_quartiles_s"] = std::move(quartiles);
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

}  // namespace strata::trainer
