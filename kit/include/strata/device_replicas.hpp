#pragma once
/// \file device_replicas.hpp
/// The engine with a replicate dimension inside the process (PyTorch's nn.DataParallel): one rank
/// drives K devices, each with a replica of the model. Every micro-batch is split along the batch
/// dimension (torch::tensor_split's cut), the replicas run forward and backward concurrently (one
/// thread per device), their gradients are added into device 0's float32 accumulation buffers
/// after each micro-batch (in the policy's reduce dtype on the way), device 0's engine takes the
/// optimizer step, and the updated parameters and buffers are copied back to the other replicas.
/// Everything moved between devices is booked to the job's counters: (K-1) x the parameter bytes
/// to the replicas per step and (K-1) x the gradient bytes back per micro-batch.
///
/// The replicas persist and receive the new parameters once per step (DataParallel re-replicates
/// at every forward: the same data movement for one micro-batch). They come from
/// StrategySetup::make_model and plain copies, which also gives CPU replicas.

#include <memory>
#include <vector>

#include "strata/engine.hpp"
#include "strata/kit.hpp"

namespace strata::inline kit_v3 {

class DeviceReplicaEngine : public Engine, public MultiDevice {
 public:
  /// Splits the micro-batch over the replicas, runs them concurrently, adds their gradients into
  /// device 0's buffers inside the reducer's round.
  torch::Tensor forward_backward(const Batch& batch, MicroStep micro) override;
  /// The engine's step on device 0, then the parameters copied to the replicas.
  void step(double lr) override;
  void state_loaded() override;
  /// One digest per replica.
  std::vector<std::uint32_t> replica_digests() const override;
  int devices_per_rank() const override { return static_cast<int>(devices_.size()); }

 protected:
  /// Runs `plan` on devices[0] (a one-rank job: throws strata::Error otherwise, naming `owner`)
  /// and builds a replica on each other device. On the CPU the process's intra-op threads are
  /// split between the replicas.
  void take_over_devices(const StrategySetup& setup, std::vector<torch::Device> devices, Plan plan);

  std::vector<torch::Device> devices_;
  std::vector<std::shared_ptr<Model>> replicas_;            ///< replicas_[0] is model_ (device 0)
  std::vector<std::vector<torch::Tensor>> replica_params_;  ///< trainable parameters per replica

 private:
  void reduce_to_primary();
  void copy_to_replicas();
  void book(std::int64_t bytes, double seconds);
};

}  // namespace strata::inline kit_v3
