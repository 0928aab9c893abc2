#pragma once
// The training loop: micro-batches through the strategy, step, metrics,
// TensorBoard, progress, periodic evaluation; and the summary of the run.

#include "io/json.hpp"
#include "train/rank_run.hpp"

namespace strata {

/// Runs the experiment on this rank and returns the summary (docs/user-guide.md keys). Rank 0 writes
/// summary.json and TensorBoard events into the run's directory. A resumed run continues its
/// loss curve and TensorBoard steps and adds a segment (summary.json `segments`: one entry per
/// process that trained the run, the top-level figures being the last one's). On any failure (a
/// non-finite loss, a lost peer, an error of its own) or a stop signal it writes what it has,
/// with status "failed" or "interrupted", the error paragraph and the rank to blame, and
/// rethrows.
Json train(RankRun& run);

}  // namespace strata
