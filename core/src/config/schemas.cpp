#include "config/schemas.hpp"

#include "config/checks.hpp"

namespace strata {

namespace detail {

const Schema<ExperimentSection>& experiment_schema() {
  static const auto schema = [] {
    Schema<ExperimentSection> s;
    s.option("name", &ExperimentSection::name, "run name; runs go to <out_dir>/<name>/<UTC time>")
        .option("out_dir", &ExperimentSection::out_dir, "parent directory of run directories");
    return s;
  }();
  return schema;
}

const Schema<OptimizerSpec>& optimizer_schema() {
  static const auto schema = [] {
    Schema<OptimizerSpec> s;
    s.option("name", &OptimizerSpec::name, "optimizer", one_of({"sgd", "adamw"}))
        .option("lr", &OptimizerSpec::lr, "peak learning rate", positive())
        .option("weight_decay", &OptimizerSpec::weight_decay, "weight decay (decoupled for adamw)", at_least(0))
        .option("momentum", &OptimizerSpec::momentum, "sgd momentum; 0 disables it", half_open(0, 1))
        .option("betas", &OptimizerSpec::betas, "adamw (beta1, beta2)", half_open(0, 1))
        .option("eps", &OptimizerSpec::eps, "adamw epsilon", positive())
        .option("fused", &OptimizerSpec::fused,
                "adamw: one fused kernel per tensor (no temporaries; last-bit differences from the default "
                "multi-tensor path, which follows LibTorch's torch::optim::AdamW exactly)");
    return s;
  }();
  return schema;
}

const Schema<TrainSection>& train_schema() {
  static const auto schema = [] {
    Schema<TrainSection> s;
    s.option("steps", &TrainSection::steps, "optimizer steps; 0 = evaluate the initial model only", between(0, 1e12))
        .option("global_batch_size", &TrainSection::global_batch_size,
                "examples per optimizer step over all ranks and micro-batches", at_least(1))
        .option("micro_batches", &TrainSection::micro_batches,
                "gradient accumulation: micro-steps per optimizer step", at_least(1))
        .option("seed", &TrainSection::seed, "seed of model initialization and data order", at_least(0))
        .option("clip_grad_norm", &TrainSection::clip_grad_norm, "clip the global gradient norm; 0 disables",
                at_least(0))
        .option("lr_schedule", &TrainSection::lr_schedule, "learning-rate schedule after warmup",
                one_of({"constant", "cosine"}))
        .option("warmup_steps", &TrainSection::warmup_steps, "linear warmup steps", at_least(0))
        .option("min_lr_ratio", &TrainSection::min_lr_ratio, "cosine floor as a fraction of optimizer.lr",
                between(0, 1))
        .option("device", &TrainSection::device, "auto, cpu, cuda or cuda:N")
        .option("threads", &TrainSection::threads, "intra-op CPU threads per rank; 0 = LibTorch default",
                at_least(0))
        .option("flush_denormals", &TrainSection::flush_denormals,
                "CPU: denormal floats (below 1.2e-38 in float32) are flushed to zero as they are computed and read as "
                "zero (FTZ and DAZ) in every thread of the rank: a model that has fitted its data computes many of "
                "them, each costing the CPU a slow path (a 10M-parameter MLP's step went from 0.2 s to 1 s in "
                "PyTorch). false keeps them (IEEE gradual underflow), as PyTorch does by default")
        .option("sync_timing", &TrainSection::sync_timing,
                "CUDA: synchronize the device after every step and time steps on the host clock (false: CUDA "
                "events, no host sync in the step)")
        .option("save_final", &TrainSection::save_final,
                "write the final full model (any strategy) into the run directory, as save_format says")
        .option("save_format", &TrainSection::save_format,
                "pt: <run>/final_model.pt (torch.save dict); safetensors: <run>/final_model/model.safetensors "
                "(+ config.json for models with a Hugging Face config; transformers' from_pretrained loads the "
                "directory)",
                one_of({"pt", "safetensors"}))
        .option("init_from", &TrainSection::init_from,
                "start from a saved model (relative to this file): a save_final output, a Hugging Face model "
                "directory, a .safetensors file or a *.index.json of shards; \"\" = fresh initialization",
                file_path())
        .option("fit_check", &TrainSection::fit_check,
                "before any rank trains, the predicted memory per rank against the device: error refuses a run "
                "predicted beyond the device by more than the estimate's uncertainty (5% from a memory_profile, 10% "
                "when scaled to another example size, 25% "
                "from the model's formula) and warns within it; warn only warns; off skips the check",
                one_of({"error", "warn", "off"}))
        .option("memory_profile", &TrainSection::memory_profile,
                "a run directory of this experiment on one device (relative to this file; summary.json and units.json, "
                "as `strata run` or `strata estimate` leaves them): the fit check takes its activations from what that "
                "run measured (scaled by the examples per micro-batch, and by the example's size when its sequence or "
                "image differs: linear) instead of the model's formula",
                file_path())
        .option("activation_checkpointing", &TrainSection::activation_checkpointing,
                "full: keep only each checkpointed unit's input in forward and recompute the unit in backward "
                "(less activation memory, one more forward of those units); none: keep every activation",
                one_of({"none", "full"}))
        .option("activation_checkpointing_every", &TrainSection::activation_checkpointing_every,
                "with activation_checkpointing = full, checkpoint every k-th unit (units 0, k, 2k, ...); 1 = all",
                at_least(1))
        .option("peak_tflops", &TrainSection::peak_tflops,
                "dense peak TFLOP/s of one device for MFU (0: the GPU's datasheet figure for the compute dtype; "
                "on a CPU, the peak `strata bench gemm` measured, else no MFU)",
                at_least(0))
        .option("init_partial", &TrainSection::init_partial,
                "init_from may miss tensors (they keep their fresh initialization, e.g. a new classifier "
                "head) and hold others (left unread, e.g. a language-model head); both are listed in the log")
        .option("deterministic", &TrainSection::deterministic,
                "debug: deterministic kernels only (cuDNN without benchmarking, cuBLAS with a fixed workspace, "
                "ATen's deterministic algorithms); an op that has none fails the run, naming it. Slower; for "
                "comparing runs bit for bit (scripts/gpu_check.sh)")
        .option("timing_warmup_steps", &TrainSection::timing_warmup_steps,
                "the first steps of each segment (allocator warm-up, cold caches) left out of the steady-state step "
                "time, steady_step_time_s: the median of the other steps' times, which comparisons use; at most half "
                "of the segment's steps are left out",
                at_least(0))
        .option("sync_audit", &TrainSection::sync_audit,
                "debug, CUDA: CUDA's sync debug mode is an error between log steps, so any host sync in the step "
                "loop outside the log steps, evaluation and checkpoints fails the run, naming the call")
        .option("trace_steps", &TrainSection::trace_steps,
                "debug: [first, last] (1-based, inclusive): every rank records a trace of those steps (LibTorch's "
                "profiler: CPU ops, collectives, Strata's step, micro-batch, unit and optimizer scopes, and on a "
                "GPU its kernels and copies on their streams) into <run>/trace/rank_<R>.pt.trace.json, Chrome's "
                "trace format (Perfetto, chrome://tracing); those steps are left out of the step-time medians; "
                "[] = no trace",
                at_least(1));
    return s;
  }();
  return schema;
}

const Schema<EvalSection>& eval_schema() {
  static const auto schema = [] {
    Schema<EvalSection> s;
    s.option("every", &EvalSection::every, "evaluate every N steps; 0 = only at the end", at_least(0))
        .option("batches", &EvalSection::batches, "batches per evaluation; 0 = whole eval split", at_least(0))
        .option("batch_size", &EvalSection::batch_size, "examples per eval batch; 0 = train.global_batch_size",
                at_least(0));
    return s;
  }();
  return schema;
}

const Schema<LogSection>& log_schema() {
  static const auto schema = [] {
    Schema<LogSection> s;
    s.option("every", &LogSection::every, "log a line and TensorBoard scalars every N steps", at_least(1));
    return s;
  }();
  return schema;
}

const Schema<DistributedSection>& distributed_schema() {
  static const auto schema = [] {
    Schema<DistributedSection> s;
    s.option("nproc", &DistributedSection::nproc,
             "processes (ranks) on this host; at most 4 per hardware thread (at least 8 allowed), a warning above "
             "one per thread on a CPU",
             at_least(1))
        .option("backend", &DistributedSection::backend, "process group backend", one_of({"auto", "gloo", "nccl"}))
        .option("timeout_s", &DistributedSection::timeout_s, "collective and rendezvous timeout in seconds",
                between(1, detail::kMaxSeconds))
        .option("heartbeat_s", &DistributedSection::heartbeat_s,
                "a rank silent for this long (stopped, killed or cut off) ends the job, naming it; 0 disables "
                "the heartbeat",
                between(0, detail::kMaxSeconds))
        .option("max_restarts", &DistributedSection::max_restarts,
                "strata's launcher restarts all ranks from the latest complete checkpoint when a rank fails, up "
                "to this many times (torchrun's --max-restarts)",
                at_least(0))
        .option("save_timeout_s", &DistributedSection::save_timeout_s,
                "deadline of the barriers around the work only rank 0 does (a checkpoint's commit and the removal "
                "of old ones, the final save): through the job's store, not a collective, so a save slower than "
                "timeout_s never aborts the ranks that wait for it",
                between(1, detail::kMaxSeconds))
        .option("hang_timeout_s", &DistributedSection::hang_timeout_s,
                "every rank alive but none advancing (no step, no collective issued) for this long while training "
                "or evaluating ends the job with a verdict naming each rank's phase, step and last collective per "
                "communicator, before the collective timeout would; 0 = timeout_s / 2 (a job of one rank: "
                "timeout_s); below timeout_s",
                between(0, detail::kMaxSeconds))
        .option("force_collectives", &DistributedSection::force_collectives,
                "debug: a one-rank job runs a real process group and issues every all-gather, reduce-scatter and "
                "all-reduce a larger job would (on the same streams), so one GPU exercises a strategy's whole NCCL "
                "path; results equal the unforced run's");
    return s;
  }();
  return schema;
}

const Schema<CheckpointSection>& checkpoint_schema() {
  static const auto schema = [] {
    Schema<CheckpointSection> s;
    s.option("every", &CheckpointSection::every, "save a checkpoint every N steps; 0 = only at_end", at_least(0))
        .option("keep", &CheckpointSection::keep,
                "complete checkpoints kept; older ones are removed once a newer one is complete; 0 = all",
                at_least(0))
        .option("dir", &CheckpointSection::dir,
                "checkpoint directory; \"\" = <run directory>/checkpoints; relative paths are relative to the "
                "run directory")
        .option("at_end", &CheckpointSection::at_end, "also save a checkpoint after the last step")
        .option("async", &CheckpointSection::async,
                "write checkpoints in the background: a save copies the state to host memory and training "
                "goes on while a writer thread writes and commits it (at most one save in flight)");
    return s;
  }();
  return schema;
}

const Schema<PrecisionSection>& precision_schema() {
  static const auto schema = [] {
    Schema<PrecisionSection> s;
    s.option("param_dtype", &PrecisionSection::param_dtype,
             "parameter dtype in forward and backward (master weights and optimizer state stay float32)",
             one_of({"float32", "bfloat16"}))
        .option("reduce_dtype", &PrecisionSection::reduce_dtype, "dtype gradients are communicated in",
                one_of({"float32", "bfloat16"}));
    return s;
  }();
  return schema;
}

const Schema<PluginsSection>& plugins_schema() {
  static const auto schema = [] {
    Schema<PluginsSection> s;
    s.option("paths", &PluginsSection::paths, "extra plugin directories or libraries (relative to this file)",
             file_path());
    return s;
  }();
  return schema;
}

}  // namespace detail

using namespace detail;

const OptionsSchema* core_section_schema(const std::string& section) {
  if (section == "experiment") return &experiment_schema().erased();
  if (section == "optimizer") return &optimizer_schema().erased();
  if (section == "train") return &train_schema().erased();
  if (section == "eval") return &eval_schema().erased();
  if (section == "log") return &log_schema().erased();
  if (section == "distributed") return &distributed_schema().erased();
  if (section == "precision") return &precision_schema().erased();
  if (section == "checkpoint") return &checkpoint_schema().erased();
  if (section == "plugins") return &plugins_schema().erased();
  return nullptr;
}

std::vector<std::string> core_section_names() {
  return {"experiment", "optimizer", "train", "eval", "log", "distributed", "precision", "checkpoint", "plugins"};
}

}  // namespace strata
