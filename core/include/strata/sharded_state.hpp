#pragma once
/// \file sharded_state.hpp
/// The state a strategy holds, described so that a checkpoint written by any strategy at any world
/// size resumes under any other. A rank's state is a list of pieces of model-wide
/// tensors: each piece names its tensor globally, gives the tensor's whole shape and covers one
/// contiguous range of its flattened elements. Flat groups make this natural: a rank's master chunk
/// is a run of consecutive elements of the concatenated parameters, so it falls into at most one
/// range per parameter, whatever the strategy and the world size.
///
/// Names (the checkpoint format keeps them):
///   "model/<dotted name>"          a trainable parameter (its float32 master), a frozen parameter
///                                  or a buffer
///   "optim/<kind>/<dotted name>"   optimizer state of a trainable parameter, shaped like it
///                                  ("exp_avg", "exp_avg_sq", "momentum_buffer")
///   "optim/step"                   the optimizer's step count: one float32 scalar for the job
///                                  (every parameter is stepped at every step)
///
/// The host writes the kSave pieces of every rank (each element of the job's state exactly once)
/// and, to resume, overwrites the kLoad pieces of every rank in place from the element ranges
/// saved, then calls state_loaded().

#include <cstdint>
#include <string>
#include <vector>

#include <torch/types.h>

#include "strata/model.hpp"

namespace strata {

/// Elements [begin, end) of the flattened tensor `name` of shape `shape`, held by this rank.
struct TensorPiece {
  std::string name;
  std::vector<std::int64_t> shape;  ///< of the whole tensor
  std::int64_t begin = 0;           ///< first element covered (flattened, row-major)
  std::int64_t end = 0;             ///< one past the last
  /// [end - begin] elements, contiguous, on the rank's device: for kLoad a view of the state itself
  /// (written in place, converted to its dtype), for kSave the values (a view or a copy).
  torch::Tensor data;
};

enum class StateAccess {
  kSave,  ///< what this rank writes: over the job, every element of every tensor exactly once
  kLoad,  ///< everything this rank holds (replicated copies included), to be overwritten in place
};

/// Optional capability of a strategy whose state can be checkpointed and resharded. The strategies
/// built on the kit's Engine have it, whatever their plan (their pieces come from
/// flat_state_pieces, strata/flat_params.hpp).
class ShardedState {
 public:
  virtual ~ShardedState();
  /// The pieces of the parameters and buffers and, with `optimizer`, of the optimizer state. For
  /// kLoad with `optimizer` the optimizer state is created first (zeros) when it does not exist.
  virtual std::vector<TensorPiece> state_pieces(StateAccess access, bool optimizer) = 0;
  /// After the host overwrote the kLoad pieces: brings every derived copy up to date (parameters
  /// from masters, replicas, the optimizer's host-side step count). Collective.
  virtual void state_loaded() = 0;
};

/// Which share of a replicated state a rank writes: ranks holding the same chunk (replicas) split it
/// into `replicas` equal runs and write run `replica`; `first` marks the one rank of the job that
/// writes job-wide values (the step count, buffers).
struct PieceOwner {
  int replica = 0;
  int replicas = 1;
  bool first = true;
};

/// Whole-tensor pieces of the model's frozen parameters and buffers ("model/<name>"): for kSave
/// float32 copies, written by `owner.first` only; for kLoad the tensors themselves.
std::vector<TensorPiece> frozen_state_pieces(const Model& model, StateAccess access, const PieceOwner& owner);

}  // namespace strata
