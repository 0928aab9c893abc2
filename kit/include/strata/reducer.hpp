#pragma once
/// \file reducer.hpp
/// How the engine synchronizes gradients, open to plugins (Engine::use_reducer).
/// Like flashlight's Reducer (add a gradient as it is ready, finalize after backward), a reducer
/// sees the two moments of every micro-batch's backward:
///
///   begin_backward(micro)  before backward: open a round (zero or stage what it needs)
///   end_backward(micro)    after backward: launch what remains and complete every reduction;
///                          when it returns, the float32 gradient buffers hold the reduced
///                          gradients the optimizer steps on
///
/// Between them, the engine's grad-ready hooks tell it each gradient as autograd accumulates it
/// (gradient_arrived), so a reducer overlaps its communication with backward without hooks of its
/// own, as the built-in GradReducer does. Gradients must leave
/// end_backward of the last micro-batch identical on every rank that replicates them, and every
/// rank must issue the same collectives in the same order.

#include <cstddef>
#include <cstdint>

#include "strata/kit.hpp"
#include "strata/strategy.hpp"

namespace strata::inline kit_v3 {

class Reducer {
 public:
  virtual ~Reducer() = default;
  /// Before the backward of micro-batch `micro`.
  virtual void begin_backward(MicroStep micro) = 0;
  /// After that backward: every reduction it owes is complete on return.
  virtual void end_backward(MicroStep micro) = 0;
  /// Parameter `index` of flat group `group` (the groups in the order backward completes them:
  /// reverse model order) has its gradient of this backward accumulated. Called by the engine's
  /// grad-ready hooks on autograd's thread, during backward. The default ignores it; a reducer
  /// that wraps another (use_reducer) passes it on.
  virtual void gradient_arrived(std::size_t group, std::size_t index) {
    (void)group;
    (void)index;
  }
  /// Bytes of reduction buffers alive now (inputs and outputs of collectives in flight).
  virtual std::int64_t in_flight_bytes() const { return 0; }
};

}  // namespace strata::inline kit_v3
