#pragma once
// Checkpoints in a run: which checkpoint `--resume` means, whether it may be resumed under this
// experiment (its training keys agree), and the saving and loading of a strategy's state
// (strata::ShardedState), the random generators and the trainer's own state (DESIGN §10).

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/store.hpp"
#include "config/experiment.hpp"
#include "io/json.hpp"
#include "strata/comm.hpp"
#include "strata/logger.hpp"
#include "strata/strategy.hpp"

namespace strata {

/// The checkpoint root of a run: [checkpoint] dir, relative to the run directory; default
/// <run>/checkpoints.
std::filesystem::path checkpoint_root(const Experiment& e, const std::filesystem::path& run_dir);

/// A checkpoint root has one owner: the run whose id (run_id(), its marker's claim) and directory
/// its file kRootOwnerFile records. A run removes only the step_* directories it wrote, and never
/// writes into, or resumes `auto` from, a root another run owns.
inline constexpr const char* kRootOwnerFile = ".strata-owner";

/// Refuses (ConfigError at checkpoint.dir, exit 2, naming the owner and the fix) a checkpoint root
/// this run may not write: one another run owns, one holding checkpoints of no known owner outside
/// this run's directory, or one this process cannot create or write. Reads only. `run_dir` may be
/// empty for a new run whose directory is not named yet (its relative root is then new, unchecked).
void check_checkpoint_root(const Experiment& e, const std::filesystem::path& run_dir, const std::string& run_id);
/// Marks this run's checkpoint root as its own (created exclusively; a copied or moved run records
/// its new directory in its own root). Throws as check_checkpoint_root when another run won it.
void claim_checkpoint_root(const Experiment& e, const std::filesystem::path& run_dir, const std::string& run_id);
/// Whether the run saves checkpoints at all.
bool saves_checkpoints(const Experiment& e);

/// The checkpoint that `resume` names:
///  - "auto": the latest complete one under this run's root; else the one STRATA_RESUME_FALLBACK
///    names (set by the launcher when it restarts a run started with --resume PATH); else none;
///  - a checkpoint directory (step_N with its metadata.json);
///  - a directory of step_N checkpoints, or a run directory (its checkpoint root under `e`, or its
///    checkpoints/): its latest complete one.
/// Throws UsageError (exit 2) when the path holds none, or names an incomplete one.
std::optional<std::filesystem::path> resolve_resume(const std::string& resume, const Experiment& e,
                                                    const std::filesystem::path& run_dir);

/// The run directory `checkpoint` belongs to, as found on disk now: the run directory it lies in (a
/// copied or moved run's own), else the directory its root's owner records while that still holds
/// the same run; empty when neither. Never the directory the checkpoint's metadata names.
std::filesystem::path checkpoint_run_dir(const std::filesystem::path& checkpoint);

/// The keys that decide what training computes (model, dataset, optimizer, precision, train minus
/// steps and the output and performance keys), as {"section.key": "toml value"}.
Json training_keys(const Experiment& e);

/// What a resume is checked against: the parts of the prepared run (null: not built, not checked).
struct ResumeSubject {
  const Model* model = nullptr;
  const Strategy* strategy = nullptr;
  const DataSpec* data = nullptr;
  /// Read every tensor's bytes against its checksum (a damaged file is found before the run
  /// directory is opened, not after).
  bool verify_data = false;
};

/// Every check a resume of checkpoint `dir` under `e` can fail, run before anything is written
/// (strata run calls it before it opens the run directory, and the launcher before it starts the
/// ranks). Throws ConfigError (exit 2) at the key to change, naming: every training key that
/// differs from the checkpoint's, steps below the checkpoint's step, a strategy that cannot load
/// a checkpoint (no ShardedState), model tensors missing, extra or of another shape, and data of
/// another description (shapes, classes, vocabulary) than the checkpoint's.
void check_resume(const Experiment& e, const std::filesystem::path& dir, const ResumeSubject& subject = {});

/// A dataset's description as JSON (saved with a checkpoint, so that its model can be rebuilt
/// without the data), and back.
Json data_spec_json(const DataSpec& spec);
DataSpec data_spec_from(const Json& json);

/// What a run saved and restored besides the strategy's tensors: rank 0's trainer state.
struct Resumed {
  std::filesystem::path dir;
  std::int64_t step = 0;
  Json trainer;  ///< trainer.json of the checkpoint
};

/// Saves and loads the checkpoints of one run.
class Checkpointer {
 public:
  /// Throws ConfigError (exit 2) when checkpoints are asked for and the strategy cannot provide them.
  /// `barrier` waits for every rank around rank 0's work (RankRun::barrier).
  Checkpointer(const Experiment& e, Strategy& strategy, Comm& comm, const Logger& log, std::filesystem::path run_dir,
               bool asked, std::function<void(const std::string&)> barrier);

  /// Whether a checkpoint is due after `step` steps.
  bool due(std::int64_t step) const;
  /// Saves after `step` steps (collective): the strategy's pieces, this rank's RNG states, and on
  /// rank 0 `trainer` (with the training keys added) and the resolved config. Logs a line.
  ckpt::SaveResult save(std::int64_t step, Json trainer);
  /// Loads `dir` (collective): checks its training keys against this experiment (ConfigError,
  /// exit 2, naming every differing key), overwrites the strategy's state and, at the same world
  /// size, the RNG states. Returns the trainer state.
  Resumed load(const std::filesystem::path& dir);
  /// The "checkpoint" member of summary.json.
  Json summary() const;

 private:
  std::vector<TensorPiece> rng_pieces(bool save) const;

  const Experiment& e_;
  Strategy& strategy_;
  ShardedState* state_ = nullptr;  // null when the strategy has no ShardedState
  Comm& comm_;
  const Logger& log_;
  std::filesystem::path run_dir_;
  std::filesystem::path root_;
  std::string run_id_;  // the run's identity, marked on its step directories
  std::function<void(const std::string&)> barrier_;
  // Saves so far in this process.
  std::int64_t saves_ = 0;
  double save_time_s_ = 0;
  ckpt::SaveResult last_{};
  std::int64_t last_step_ = -1;
  std::optional<Resumed> resumed_;
};

}  // namespace strata
