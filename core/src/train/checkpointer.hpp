#pragma once
// The checkpointer of a training run: whether a checkpoint may be resumed under this experiment
// (its training keys, model and data agree), and the saving and loading of a strategy's state
// (strata::ShardedState), the random generators and the trainer's own state. Where
// checkpoints go and which one `--resume` means are the run place's (launch/run_place.hpp); the
// files themselves are ckpt/store.hpp's.

#include <atomic>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <c10/core/Event.h>

#include "ckpt/store.hpp"
#include "config/experiment.hpp"
#include "launch/run_place.hpp"
#include "io/json.hpp"
#include "strata/comm.hpp"
#include "strata/logger.hpp"
#include "strata/strategy.hpp"

namespace strata {

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
  /// [checkpoint] async: copies them to host memory and returns (the result's dir and seconds,
  /// the training thread's stall); a writer thread writes and commits them. A save waits for the
  /// one still in flight first (and says so), and rethrows its error.
  ckpt::SaveResult save(std::int64_t step, Json trainer);
  /// Async: collects a save the writer finished (logs it, rethrows its error); cheap otherwise.
  void poll();
  /// Async: waits for the save in flight, if any (before the run's summary). Rethrows its error.
  void finish();
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;
  /// Loads `dir` (collective): checks its training keys against this experiment (ConfigError,
  /// exit 2, naming every differing key), overwrites the strategy's state and, at the same world
  /// size, the RNG states. Returns the trainer state.
  Resumed load(const std::filesystem::path& dir);
  /// The "checkpoint" member of summary.json.
  Json summary() const;

 private:
  std::vector<TensorPiece> rng_pieces(bool save) const;
  /// Replaces each piece's data by a host copy (staging_, pinned on a GPU); on a GPU returns the
  /// event after the copies, for the writer to wait on.
  std::optional<c10::Event> snapshot(std::vector<TensorPiece>& pieces);
  /// Joins the writer: logs its save, or rethrows its error.
  void collect();
  void log_saved(std::int64_t step, const ckpt::SaveResult& r) const;

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
  double stall_s_ = 0;  // the training thread's time in save()
  // [checkpoint] async: the save in flight.
  std::vector<torch::Tensor> staging_;  // host copies of the pieces, reused from save to save
  std::thread writer_;
  std::atomic<bool> writer_done_{false};
  std::exception_ptr writer_error_;
  ckpt::SaveResult pending_{};
  std::int64_t pending_step_ = -1;
};

}  // namespace strata
