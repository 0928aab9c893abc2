#pragma once
/// \file strategy.hpp
/// The Strategy contract: how a model is placed on ranks, how gradients are synchronized and
/// who steps the optimizer. The trainer drives one optimizer step as
///
///   for each micro-batch m of M:  loss_m = forward_backward(batch_m, {m, M, scale})
///   norm = finish_gradients(clip)       // sync done, clipped; a device scalar
///   step(lr)                            // optimizer step, gradients cleared
///
/// Device discipline: batches arrive on this rank's device (the trainer copies them
/// there from pinned memory, ahead of use), and the loss and the norm stay on it: the trainer reads
/// them on the host only at log steps, so a step queues its work on a GPU without waiting for it.
/// A strategy must not read tensor values on the host inside these three calls.
///
/// Invariant every strategy keeps: with the same seed, data order and global batch, its
/// parameters after K steps equal those of `single` up to floating-point reduction order.
/// Optional features are separate small interfaces (see below), not flags.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "strata/comm.hpp"
#include "strata/dataset.hpp"
#include "strata/logger.hpp"
#include "strata/model.hpp"
#include "strata/optim.hpp"
#include "strata/precision.hpp"

namespace strata {

/// Everything a strategy receives when it takes the model over.
struct StrategySetup {
  /// Built on the CPU with the same seed on every rank (a strategy still makes every rank start
  /// from rank 0's values). The strategy moves it to `device`; sharded strategies a unit at a time.
  std::shared_ptr<Model> model;
  OptimizerSpec optimizer;        ///< the strategy builds the optimizer over what it holds
  Comm* comm = nullptr;           ///< collectives of this job on `device` (never null; world 1 for one process)
  torch::Device device{torch::kCPU};  ///< this rank's device
  const Logger* log = nullptr;    ///< never null
  /// `[precision]`: the dtype of parameters in forward/backward and of gradients on the wire. A
  /// strategy that cannot honor a mixed policy throws strata::Error from setup() saying so.
  PrecisionPolicy precision;
  int local_world_size = 1;  ///< ranks of this job on this host (e.g. a node-local shard group)
  /// Builds another instance of the model (same architecture, on the CPU; its values are to be
  /// overwritten), for strategies that hold several replicas in one process (dp).
  std::function<std::shared_ptr<Model>()> make_model;
};

/// A model's full state by dotted name (model().named_parameters() and named_buffers() keys):
/// every parameter and buffer, whole, float32 where floating point.
using StateDict = std::vector<std::pair<std::string, torch::Tensor>>;
/// `tensor` as a state-dict entry: a detached float32 (when floating point) copy on the CPU.
torch::Tensor state_dict_copy(const torch::Tensor& tensor);

/// Position of a micro-batch inside one optimizer step (gradient accumulation), and how its
/// summed loss enters the gradient.
struct MicroStep {
  int index = 0;  ///< 0-based
  int count = 1;  ///< micro-batches per optimizer step
  /// world size / target elements of the whole global batch (every micro-batch of every rank): a
  /// float32 scalar on the device. Backward of `loss_sum * loss_scale` on every rank, then the
  /// average over ranks, gives the gradient of the global mean loss, however the targets are
  /// spread over micro-batches and ranks.
  torch::Tensor loss_scale;
  bool last() const noexcept { return index + 1 == count; }
  /// The loss this micro-batch backpropagates: its summed loss times loss_scale.
  torch::Tensor scaled(const torch::Tensor& loss_sum) const { return loss_sum * loss_scale; }
};

/// Bytes of model state this rank holds between steps, measured from its tensors.
struct ModelStateBytes {
  std::int64_t params = 0;     ///< parameters (and master copies), in bytes
  std::int64_t grads = 0;      ///< gradients, in bytes
  std::int64_t optimizer = 0;  ///< optimizer state, in bytes
  /// State the strategy keeps besides, by name (an outer optimizer's momentum, error-feedback
  /// buffers): summary.json's memory.model_state_bytes.NAME, and the schedule's
  /// ScheduleMemory::extra of that name, which `strata check` holds it to.
  std::vector<std::pair<std::string, std::int64_t>> extra{};
  std::int64_t total() const noexcept {
    std::int64_t sum = params + grads + optimizer;
    for (const auto& [name, bytes] : extra) sum += bytes;
    return sum;
  }
};

class Strategy {
 public:
  virtual ~Strategy() = default;

  /// Takes the model over: place, replicate, shard or wrap it and build the optimizer.
  /// Called once, before any other method.
  virtual void setup(const StrategySetup& setup) = 0;

  /// Forward and backward of one micro-batch of this rank (the batch on this rank's device):
  /// backward of `micro.scaled(model().loss(output, batch))`, so that gradients accumulate this
  /// rank's share of the global mean loss. Returns the micro-batch's summed loss (a detached
  /// scalar on the device, unscaled).
  virtual torch::Tensor forward_backward(const Batch& batch, MicroStep micro) = 0;

  /// Completes gradient synchronization after the last micro-batch, clips the global gradient
  /// norm to `max_norm` when `max_norm > 0`, and returns the global norm before clipping: a
  /// scalar on the device (the same on every rank), not read on the host. `max_norm ==
  /// kNormNotNeeded`: nothing clips and nobody reads the norm this step (the trainer computes it
  /// only at log steps or for clipping); a strategy may then skip it and return an undefined tensor.
  virtual torch::Tensor finish_gradients(double max_norm) = 0;
  /// finish_gradients()'s `max_norm` of a step that needs no norm.
  static constexpr double kNormNotNeeded = -1.0;

  /// Optimizer step with learning rate `lr`; clears gradients afterwards.
  virtual void step(double lr) = 0;

  /// Model output (float32) for the batch's inputs (on this rank's device) in evaluation mode,
  /// without gradients.
  virtual torch::Tensor evaluate(const Batch& batch) = 0;

  /// The model's loss and metric (for evaluation of the outputs of evaluate()).
  virtual const Model& model() const = 0;

  /// Global L2 norm over all parameters of the model; the same on every rank.
  virtual double parameter_norm() = 0;

  /// What this rank holds now (sampled between steps).
  virtual ModelStateBytes memory() const = 0;

  /// The full (gathered) model state as CPU tensors on rank 0, gathered a group at a time so that
  /// no rank holds more than one gathered unit on its device; other ranks return an empty dict.
  /// Collective: every rank calls it. `[train] save_final` writes it in the form `[train]
  /// init_from` loads, whatever strategy produced it.
  virtual StateDict full_state_dict() = 0;

  /// After the last optimizer step of the run, before its final evaluation; collective (every rank
  /// calls it). Work a strategy owes its training, counted as training traffic: a local-update
  /// strategy's synchronization of a round that the last step cut short. Default: nothing.
  virtual void finish_training() {}
};

/// Optional capability of a strategy whose ranks hold replicas of the model (or of some of it)
/// that must stay identical: a digest of what this rank holds, which the trainer gathers from every
/// rank into summary.json (`replica_digests`) and compares, so a replica that drifted is caught.
class ReplicaDigest {
 public:
  virtual ~ReplicaDigest();
  /// CRC-32C of the bytes of every replicated parameter and buffer, one per replica this rank
  /// holds (dp: one per device), in a fixed order; none (empty, on every rank alike) when this run
  /// holds no whole replica (sharded parameters). Not collective.
  virtual std::vector<std::uint32_t> replica_digests() const = 0;
};
/// CRC-32C of the bytes of `tensor` (copied to the CPU), extending `crc`: what replica digests are
/// made of.
std::uint32_t tensor_digest(const torch::Tensor& tensor, std::uint32_t crc = 0);

/// Optional capability of a strategy that computes on several devices inside one rank (dp): the
/// host reports `devices` = world size x devices_per_rank() in summary.json and the hparams.
class MultiDevice {
 public:
  virtual ~MultiDevice();
  /// Devices this rank computes on (known after setup()).
  virtual int devices_per_rank() const = 0;
};

}  // namespace strata
