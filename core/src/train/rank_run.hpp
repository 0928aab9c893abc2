#pragma once
// One rank's run, in one object: what prepare() built and checked (writing nothing), the job the
// rank joined, and the place the run lives in (launch/run_place.hpp). The trainer works with it
// by reference and hands the strategy its StrategySetup; nothing is copied field by field on
// the way.

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "config/experiment.hpp"
#include "launch/run_place.hpp"
#include "job/world.hpp"
#include "strata/comm.hpp"
#include "strata/dataset.hpp"
#include "strata/logger.hpp"
#include "strata/model.hpp"
#include "strata/registry.hpp"
#include "strata/strategy.hpp"

namespace strata {

class JobMonitor;

struct RankRun {
  // ---- Built and checked by prepare(), before anything is written.
  Experiment experiment;
  WorldInfo world;
  Registry registry;
  /// The job's collectives (a local one for one process); set by run_rank. Declared before the
  /// strategy so that it is destroyed after it: the strategy's subgroups and separate streams are
  /// children of this communicator and must go first (Comm::subgroup, Comm::separate_stream).
  std::unique_ptr<Comm> comm;
  std::shared_ptr<Dataset> dataset;
  std::shared_ptr<Model> model;  ///< null when validation skipped building it (a large model)
  std::shared_ptr<Strategy> strategy;
  torch::Device device{torch::kCPU};
  std::string device_note;  ///< why "auto" chose the CPU on a host with GPUs, for the log
  std::optional<double> estimated_parameters;  ///< the model plugin's estimate, when it has one
  std::string memory_fit;  ///< the fit check's line (memory per rank against the device), for validate
  std::string memory_warning;  ///< the fit check's warning: said once, by validate or before the ranks start
  /// "model initialized from ..." when [train] init_from was loaded into the model, for the log.
  std::string init_loaded;
  /// What init_partial left out of that load (a warning), empty when nothing.
  std::string init_skipped;

  // ---- The job (run_rank); `comm` is above.
  std::string backend = "none";  ///< process-group backend, "none" for one process
  Logger log;
  /// The rank's watch over the job (stop signals, failure records, the verdict when this thread
  /// is stuck); may be null.
  JobMonitor* monitor = nullptr;
  /// Waits until every rank gets to the point `name` names (unique in the job), through the job's
  /// store with the deadline [distributed] save_timeout_s: around rank-0-only work. Nothing to
  /// wait for in a one-process run.
  std::function<void(const std::string& name)> barrier = [](const std::string&) {};

  // ---- Where it lives and what it continues from.
  RunPlace place;

  /// Another instance of the model (same plugin and options, on the CPU), for strategies that
  /// hold several replicas in one process (dp).
  std::shared_ptr<Model> make_model() const;
  /// What the strategy's setup() is handed.
  StrategySetup strategy_setup() const;
};

}  // namespace strata
