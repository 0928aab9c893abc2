#pragma once
// The fit check of `strata validate` (and of `strata run` before any rank trains): the memory one
// rank of a strategy needs at a world size, from the estimate module's per-strategy memory model
// (strategies.hpp) with activations from the model's own analytic estimate (no profile run),
// against the memory of the device that rank would use. When it does not fit, which built-in
// strategies at this world size, or which larger world size of this strategy, would.

#include <functional>
#include <string>
#include <vector>

#include "estimate/strategies.hpp"

namespace strata::estimate {

/// What the check needs, gathered by the host from the experiment and the model's estimates.
struct FitRequest {
  std::string strategy;
  int world_size = 1;
  /// What the estimator knows of a strategy (strategy_model: its schedule with the experiment's
  /// options for the request's strategy, the defaults for the others); unset: every strategy a
  /// full replica, from nothing declared.
  std::function<StrategyModel(const std::string& strategy)> model;
  double parameters = 0;                    ///< elements
  std::vector<double> unit_parameters;      ///< forward order; empty: one unit of every parameter
  double activation_bytes_per_sample = 0;   ///< held between forward and backward, in the activations' dtype
  /// [train] activation checkpointing: every k-th unit recomputes its activations in backward
  /// (1: every unit); 0: none.
  int checkpoint_every = 0;
  double global_batch = 1;
  int micro_batches = 1;
  std::string optimizer = "adamw";
  double momentum = 0.9;
  std::string param_dtype = "float32";
  std::string reduce_dtype = "float32";
  int ranks_per_host = 0;                   ///< ranks of the job on one host; 0: every rank on one host
  double device_memory = 0;                 ///< bytes one rank may use
  /// GPU ranks: host bytes one rank may use for what it offloads there (0: not known, unchecked).
  double host_memory = 0;
  /// The request's strategy with optimizer offload on (its `offload` option), tried when it does
  /// not fit; unset where the strategy has no such option or it is already on.
  std::function<StrategyModel()> offloaded;
  std::string device_memory_source;         ///< how device_memory was found, in words
  /// The ranks share the device memory (CPU ranks of one host): at a larger world size each
  /// rank's share shrinks in proportion (device_memory x world_size / w).
  bool shared_memory = false;
  /// Strategies tried at this world size when it does not fit, and at larger ones for a strategy
  /// that runs on one device only (fit_candidates: every registered strategy with a schedule).
  std::vector<std::string> candidates;
};

struct FitCheck {
  StrategyEstimate estimate;          ///< the strategy at the request's world size
  double peak = 0;                    ///< bytes per rank
  bool fits = true;
  std::vector<std::string> would_fit; ///< e.g. "NAME at 4 ranks (12.3 GiB per rank)"
  std::string grown;                  ///< the strategies tried at larger world sizes
};

/// The request's strategy at its world size, and where it does not fit, what would.
FitCheck check_fit(const FitRequest& request);

/// "parameters 5.78 GiB + gradients 3.85 GiB + optimizer 7.71 GiB + activations 1.89 GiB + ..."
std::string fit_breakdown(const MemoryEstimate& memory);
/// The line `strata validate` prints when it fits.
std::string fit_line(const FitRequest& request, const FitCheck& check);
/// The error paragraph when it does not fit (what; the fix is fit_fix).
std::string fit_refusal(const FitRequest& request, const FitCheck& check);
std::string fit_fix(const FitRequest& request, const FitCheck& check);

/// Bytes as "5.78 GiB".
std::string gib_text(double bytes);

}  // namespace strata::estimate
