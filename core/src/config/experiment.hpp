#pragma once
// The experiment file: TOML -> typed sections -> one validation pass.
//
// load_experiment() parses the file, applies `--set` overrides and validates the core sections;
// validate_plugin_sections() then validates [model], [dataset] and [strategy] against the
// schemas of the plugins they name, once the plugins are loaded. Every error is a ConfigError
// carrying file:line:column (or the `--set` override) and the dotted key.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "strata/errors.hpp"
#include "strata/optim_spec.hpp"
#include "strata/options.hpp"
#include "strata/registry.hpp"

namespace strata {

/// [experiment]
struct ExperimentSection {
  std::string name = "experiment";  ///< run name; also the directory under out_dir
  std::string out_dir = "runs";     ///< parent of run directories (relative to the working directory)
};

/// [train]
struct TrainSection {
  std::int64_t steps = 200;              ///< optimizer steps
  std::int64_t global_batch_size = 64;   ///< examples per optimizer step, over all ranks and micro-batches
  std::int64_t micro_batches = 1;        ///< gradient accumulation: sequential micro-steps per optimizer step
  std::int64_t seed = 0;                 ///< seeds model initialization and data order
  double clip_grad_norm = 0.0;           ///< clip the global gradient norm to this value; 0 disables
  std::string lr_schedule = "constant";  ///< "constant" or "cosine" (linear warmup, then cosine decay)
  std::int64_t warmup_steps = 0;         ///< linear warmup from 0 to optimizer.lr over this many steps
  double min_lr_ratio = 0.0;             ///< cosine floor, as a fraction of optimizer.lr
  std::string device = "auto";           ///< "auto" (CUDA when present), "cpu", "cuda" or "cuda:N"
  std::int64_t threads = 0;              ///< intra-op CPU threads per rank; 0 = LibTorch's default
  bool flush_denormals = true;           ///< CPU: denormal floats computed and read as zero (FTZ/DAZ)
  bool sync_timing = false;              ///< CUDA: synchronize after every step (host-clock step time)
  bool save_final = false;               ///< write the final full model into the run directory
  std::string save_format = "pt";        ///< "pt": final_model.pt; "safetensors": final_model/ (Hugging Face layout)
  std::string activation_checkpointing = "none";  ///< "none" or "full": recompute units' activations in backward
  std::int64_t activation_checkpointing_every = 1;  ///< with "full": checkpoint units 0, k, 2k, ... (1 = every unit)
  double peak_tflops = 0;                ///< dense peak TFLOP/s per device for MFU; 0 = the device's table entry
  bool init_partial = false;             ///< init_from may lack tensors (fresh) or hold extra ones (unread)
  bool deterministic = false;            ///< debug: deterministic kernels (cuDNN, cuBLAS, ATen), an error where none
  bool sync_audit = false;               ///< debug, CUDA: a host sync between log steps is an error
  std::vector<std::int64_t> trace_steps; ///< debug: [first, last] steps (1-based) traced per rank; empty = none
  std::int64_t timing_warmup_steps = 5;  ///< steps of each segment left out of the steady-state step time
  /// The memory fit check before any rank trains: "error" refuses a run predicted not to fit (beyond
  /// the estimate's uncertainty), "warn" only says so, "off" skips it.
  std::string fit_check = "error";
  /// A run directory of this experiment on one device (summary.json, units.json): the fit check's
  /// activations come from what it measured instead of the model's formula. "" = none.
  std::string memory_profile;
  std::string init_from;                 ///< start from a saved model (save_final output, Hugging Face
                                         ///< directory, safetensors file or index); "" = fresh init
};

/// [precision]: the mixed-precision policy handed to the strategy.
struct PrecisionSection {
  std::string param_dtype = "float32";   ///< parameters in forward and backward
  std::string reduce_dtype = "float32";  ///< gradients on the wire
};

/// [eval]
struct EvalSection {
  std::int64_t every = 100;      ///< evaluate every N steps; 0 = only at the end (always at the end)
  std::int64_t batches = 20;     ///< batches per evaluation; 0 = the whole eval split
  std::int64_t batch_size = 0;   ///< examples per eval batch; 0 = train.global_batch_size
};

/// [log]
struct LogSection {
  std::int64_t every = 10;  ///< log a line and TensorBoard scalars every N steps
};

/// [distributed]
struct DistributedSection {
  std::int64_t nproc = 1;          ///< processes (ranks) to run on this host
  std::string backend = "auto";    ///< "auto", "gloo" or "nccl"
  double timeout_s = 300.0;        ///< collective and rendezvous timeout, in seconds
  /// A rank whose heartbeat (published in the job's store) stops for this long, or that loses
  /// the store for this long, ends the job naming it; 0 disables the heartbeat.
  double heartbeat_s = 30.0;
  std::int64_t max_restarts = 0;   ///< strata's launcher restarts every rank from the latest checkpoint
                                   ///< up to this many times when one fails (torchrun's --max-restarts)
  bool force_collectives = false;  ///< debug: a one-rank job issues every collective a larger one would
  double save_timeout_s = 3600.0;  ///< deadline of the barriers around rank 0's saves (checkpoint, final model)
  double hang_timeout_s = 0.0;     ///< no rank advancing this long while training is a hang; 0 = timeout_s / 2 (world 1: timeout_s)
};

/// [checkpoint]
struct CheckpointSection {
  std::int64_t every = 0;  ///< save every N steps; 0 = only at_end
  std::int64_t keep = 2;   ///< complete checkpoints kept (older ones removed once a newer one is complete); 0 = all
  std::string dir;         ///< checkpoint root; "" = <run directory>/checkpoints; relative to the run directory
  bool at_end = false;     ///< also save after the last step
  /// Save in the background: the step copies the rank's state to host memory and goes on; a
  /// writer thread writes and commits it (at most one save in flight).
  bool async = false;
};

/// [plugins]
struct PluginsSection {
  std::vector<std::string> paths;  ///< extra plugin directories or library files (relative to the file)
};

/// [model], [dataset] or [strategy]: the plugin name and its validated options.
struct PluginSection {
  std::string name;
  Options options;
};

struct ExperimentDocument;  // the parsed TOML with override origins (config/experiment.cpp)

struct Experiment {
  std::filesystem::path file;  ///< the experiment file as given
  ExperimentSection experiment;
  PluginSection model;
  PluginSection dataset;
  PluginSection strategy;
  OptimizerSpec optimizer;
  TrainSection train;
  EvalSection eval;
  LogSection log;
  DistributedSection distributed;
  PrecisionSection precision;
  CheckpointSection checkpoint;
  PluginsSection plugins;
  std::shared_ptr<const ExperimentDocument> document;

  /// Directory of the experiment file (relative paths in it resolve here).
  std::filesystem::path directory() const;
  /// [plugins] paths resolved against directory().
  std::vector<std::filesystem::path> plugin_paths() const;
  /// Where `key_path` (e.g. "train.steps") was set; falls back to its section, then the file.
  SourceLocation location(const std::string& key_path) const;
  /// Whether the experiment file itself sets `key_path` (not a --set override, not a default).
  bool in_file(const std::string& key_path) const;
  /// A ConfigError at `key_path`.
  ConfigError error(const std::string& key_path, const std::string& message, std::string fix = {}) const;
};

/// Parses `file`, applies `overrides` ("section.key=value", value in TOML syntax or a bare
/// string) and validates the core sections. Throws ConfigError.
Experiment load_experiment(const std::filesystem::path& file, const std::vector<std::string>& overrides = {});
/// As above, with where each override comes from (a sweep file's line) instead of "--set TEXT";
/// `origins` may be shorter than `overrides`.
Experiment load_experiment(const std::filesystem::path& file, const std::vector<std::string>& overrides,
                           const std::vector<SourceLocation>& origins);

/// Validates the plugin sections against the plugins' schemas and fills their options.
void validate_plugin_sections(Experiment& experiment, const Registry& registry);
/// The options of strategy `entry` (the experiment's or another) from `sets` ("KEY=VALUE": a key
/// of its schema without the `strategy.` prefix, a TOML value), its defaults for the rest: what
/// `strata check --set` and `strata estimate --strategies` give a strategy. A key its schema does
/// not have, or a value it rejects, is a ConfigError naming `strategy.KEY`.
Options strategy_options_from(const Experiment& experiment, const RegistryEntry& entry,
                              const std::vector<std::string>& sets);

/// The resolved experiment (every default filled in) as TOML text.
std::string resolved_toml(const Experiment& experiment);

/// Every resolved key as ("section.key", value in TOML syntax), in resolved_toml()'s order.
std::vector<std::pair<std::string, std::string>> resolved_values(const Experiment& experiment);

/// Schemas of the core sections, for `strata describe` ("train", "optimizer", ...); null if unknown.
const OptionsSchema* core_section_schema(const std::string& section);
/// Names of the core sections.
std::vector<std::string> core_section_names();

}  // namespace strata
