#pragma once
// The training loop (DESIGN §2 step 7): micro-batches through the strategy, step, metrics,
// TensorBoard, progress, periodic evaluation; and the summary of the run.

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>

#include "config/experiment.hpp"
#include "io/json.hpp"
#include "strata/comm.hpp"
#include "strata/dataset.hpp"
#include "strata/logger.hpp"
#include "strata/strategy.hpp"

namespace strata {

class JobMonitor;

/// Everything one rank's training loop works with; owned by the caller.
struct TrainerParts {
  const Experiment* experiment = nullptr;
  std::shared_ptr<Dataset> dataset;
  std::shared_ptr<Model> model;       ///< handed to the strategy at setup
  std::shared_ptr<Strategy> strategy;
  Comm* comm = nullptr;
  const Logger* log = nullptr;
  torch::Device device{torch::kCPU};
  std::string backend = "none";       ///< process-group backend, "none" for one process
  int local_world_size = 1;           ///< ranks on this host
  std::function<std::shared_ptr<Model>()> make_model;  ///< another model instance (StrategySetup::make_model)
  std::filesystem::path run_dir;      ///< outputs go here (rank 0 writes)
  /// A checkpoint to resume from (after the strategy's setup), or none.
  std::optional<std::filesystem::path> resume;
  int restarts = 0;                   ///< restarts of this job so far (the launcher's count), for the summary
  /// The rank's watch over the job (stop signals, failure records, the verdict when this thread is
  /// stuck); may be null.
  JobMonitor* monitor = nullptr;
};

/// Runs the experiment on this rank and returns the summary (DESIGN §7 keys). Rank 0 writes
/// summary.json and TensorBoard events into run_dir. On any failure (a non-finite loss, a lost
/// peer, an error of its own) or a stop signal it writes what it has, with status "failed" or
/// "interrupted", the error paragraph and the rank to blame, and rethrows.
Json train(TrainerParts parts);

}  // namespace strata
