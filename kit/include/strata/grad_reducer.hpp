#pragma once
/// \file grad_reducer.hpp
/// Gradient synchronization over flat groups, shared by ddp, zero1-3 and fsdp (and the gradient
/// accumulation of every replica strategy): grad-ready hooks on every parameter, collectives
/// launched in one fixed group order as soon as a group's gradients are complete (overlapping the
/// rest of backward; Li et al. 2020), a bounded number of reductions in flight, each input
/// released as soon as its reduction is complete.
///
/// What is reduced, by the groups' GradHolding:
///   kFull   after the last micro-batch: all-reduce of the [padded] buffer over `replicate` (ddp),
///           or reduce-scatter over `shard` into this rank's chunk of it (zero1)
///   kShard  after every micro-batch: autograd's gradients staged into one [padded] tensor and
///           reduce-scattered over `shard` (a plain copy when N = 1) into the float32 shard; in the
///           last one each shard is averaged over `replicate` as soon as its reduce-scatter is
///           complete, while backward goes on (HYBRID_SHARD, NO_SHARD). With a ReduceCodec
///           (codec.hpp) the reduce-scatter is an all-to-all of encoded rows, one or two levels
///           (ZeRO++ qgZ), summed in float32 on arrival.
/// Every collective averages (ReduceOp::kAvg) and carries the policy's reduce dtype; the result is
/// accumulated in float32.
///
/// On CUDA the collectives run on the communicators' own streams, ordered after the compute
/// stream by c10d's events; completing a reduction makes the compute stream wait for it (no host
/// sync). Collectives are issued in the same order on every rank: group g only after every group
/// before it in launch order.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "strata/buckets.hpp"
#include "strata/codec.hpp"
#include "strata/comm.hpp"
#include "strata/flat_params.hpp"
#include "strata/kit.hpp"
#include "strata/reducer.hpp"
#include "strata/strategy.hpp"

namespace strata::inline kit_v3 {

struct GradReducerOptions {
  /// The group the flat groups are sharded over (their shard_size must be its world size); null
  /// when they are not sharded (N = 1).
  Comm* shard = nullptr;
  /// Ranks that hold the same shards: gradients are averaged over them (ddp: the job; HYBRID_SHARD:
  /// across shard groups); null or one rank: none.
  Comm* replicate = nullptr;
  /// Launch from the grad-ready hooks during backward; false: all after backward.
  bool overlap = true;
  /// kShard: consecutive ready groups are reduced in one call up to this many bytes (a ready group
  /// waits, staged, for the next while they fit); 0: one call each.
  std::int64_t coalesce_bytes = 0;
  /// Reductions whose buffers may be alive at once (>= 1); launching one more first completes the
  /// oldest.
  int max_in_flight = 2;
  /// A parameter without a gradient counts as zero (ddp's find_unused_parameters); false: an error
  /// naming it.
  bool allow_missing = false;
  /// Name of the strategy, for messages ("ddp", "zero2", ...).
  std::string owner = "strategy";
  /// What to tell the user when gradients are missing and allow_missing is false.
  std::string missing_fix = "every trainable parameter must take part in every forward";
  /// kShard: how the shards' reductions travel (codec.hpp): encoded rows exchanged by all-to-all
  /// over `shard`, decoded and summed in float32; null: a reduce-scatter.
  std::shared_ptr<ReduceCodec> codec;
  /// With a codec, a two-level exchange: first inside `codec_inner` (consecutive members of the
  /// shard group), then over `codec_outer` (the members at the same position of every such
  /// sub-group); null: one all-to-all over `shard`.
  Comm* codec_inner = nullptr;
  Comm* codec_outer = nullptr;
  /// Called (on the autograd thread) when every gradient of a group (by index in launch order) for
  /// this micro-batch has arrived: zero3 and fsdp free the unit's gathered parameters there.
  std::function<void(std::size_t)> on_group_complete;
};

/// The built-in Reducer: the groups' reductions, launched as the engine's grad-ready hooks report
/// their gradients (gradient_arrived).
/// The groups (in launch order: the order backward completes them) must outlive it.
class GradReducer final : public Reducer {
 public:
  GradReducer(std::vector<FlatGroup*> groups, const Precision& precision, GradReducerOptions options);
  ~GradReducer() override;
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  /// Before the backward of micro-batch `micro`: opens a round of collectives when it communicates.
  void begin_backward(MicroStep micro) override;
  /// After that backward: launches what the hooks did not (missing gradients: zeros, or an error
  /// naming them after every launched collective has completed), completes every reduction and,
  /// after the last micro-batch, averages the shards over the replicate group.
  void end_backward(MicroStep micro) override;
  /// Bytes of reduction buffers alive now (staged gradients, inputs and outputs in flight).
  std::int64_t in_flight_bytes() const override;
  /// Parameter `index` of group `group` (in launch order) has its gradient: stages or accumulates
  /// it, and launches the collectives that became startable.
  void gradient_arrived(std::size_t group, std::size_t index) override;

 private:
  struct Reduction;
  void grad_ready(std::size_t group, std::size_t k, std::size_t param);
  void launch(std::size_t group);
  void launch_coded(Reduction& r, std::int64_t width);
  /// A coded reduction whose exchange completed: its next level issued (false), or its average
  /// decoded into r.output (true).
  bool finish_coded(Reduction& r);
  void flush(bool all);
  void complete_oldest();
  void complete_all();
  void average_shard(std::size_t group);
  void complete_averages();
  bool communicates(MicroStep micro) const;
  /// Whether the shards' reductions travel through the codec (exchanged, not reduce-scattered).
  bool coded() const;

  std::vector<FlatGroup*> groups_;
  Precision precision_;
  GradReducerOptions options_;
  GradHolding holding_ = GradHolding::kFull;
  std::vector<std::string> param_names_;     // every parameter, in schedule numbering
  std::vector<std::size_t> arrived_;         // per group: gradients arrived in this micro-batch
  std::vector<bool> param_arrived_;          // per parameter, in this micro-batch
  BucketSchedule schedule_;
  bool round_open_ = false;
  std::vector<std::size_t> ready_;           // kShard: launched groups waiting to be coalesced
  std::vector<torch::Tensor> staged_;        // kShard, per group: its staged gradients until reduced
  std::vector<std::unique_ptr<Reduction>> pending_;
  bool average_now_ = false;  // kShard, last micro-batch: shards averaged over `replicate` as reduced
  struct Average {             // a group's average over `replicate` in flight
    std::size_t group;
    torch::Tensor wire;        // what travels (the shard's gradient itself, or its cast)
    std::shared_ptr<CommWork> work;
  };
  std::vector<Average> averages_;
  std::vector<std::size_t> first_param_;  // per group: the schedule number of its first parameter
};

}  // namespace strata::inline kit_v3
