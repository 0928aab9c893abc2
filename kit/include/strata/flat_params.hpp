#pragma once
/// \file flat_params.hpp
/// The one flat layout of every strategy: a DDP gradient bucket, a ZeRO partition and an FSDP
/// FlatParameter are all a strata::FlatGroup, differing only in how many ranks it is sharded over,
/// whether its full parameters persist, and where its gradients accumulate.
///
/// A group concatenates some parameters into one flat tensor, padded with zeros to a multiple of
/// the shard group size N, cut into N equal chunks; rank r of the shard group owns chunk r:
///
///   full   [padded]  parameter dtype: the model's parameters are views of it (its storage may be
///                    released between uses: zero3, fsdp)
///   master [chunk]   float32: the optimizer's leaf (a view of full when N = 1 or full persists,
///                    and the policy is float32, unless gather_unsharded; else its own copy)
///   grads  kFull:  [padded] float32 accumulation buffer on every rank, reduced once per step
///                  (single, dp, ddp, zero1); the master's grad is its chunk
///          kShard: [chunk] float32 shard; autograd's gradients of each micro-batch are reduced
///                  into it (zero2, zero3, fsdp) and dropped
///
/// Invariants: the padding of master and of every gradient is zero (so norms and optimizer
/// updates over whole chunks are exact); a parameter without a gradient in a micro-batch counts as
/// a zero gradient, as FSDP's and ZeRO's flat buffers do (the optimizer updates every element).

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "strata/comm.hpp"
#include "strata/kit.hpp"
#include "strata/optim.hpp"
#include "strata/precision.hpp"
#include "strata/sharded_state.hpp"

namespace strata::inline kit_v3 {

/// Releases a tensor's storage in place (0 bytes) while the tensor and every view of it live on
/// (FSDP's "resize the storage to 0"): autograd's saved references see the data again once
/// reallocate_storage() and a gather have refilled it.
///
/// Streams: the memory goes back to the caching allocator on the current (compute) stream, and
/// c10d's stash, which keeps the tensors of a pending collective alive, does not keep this
/// storage: the caller must first make the current stream wait for every collective that reads
/// or writes it (CommWork::wait()), so that the allocator can only hand the memory out again
/// after the collective. Engine::release does so by construction (it completes the unit's
/// all-gathers before it frees them, and refuses otherwise).
void free_storage(const torch::Tensor& tensor);
/// Gives a storage freed by free_storage() its size back: `bytes` (contents undefined).
void reallocate_storage(const torch::Tensor& tensor, std::size_t bytes);
/// Bytes of the distinct storages behind `tensors` (a freed storage counts 0, a shared one once).
std::int64_t storage_bytes(const std::vector<torch::Tensor>& tensors);

/// How a group holds its full parameters between uses.
enum class Residency {
  kPersistent,  ///< always materialized on every rank (replicas, zero1, zero2)
  kGathered,    ///< allocated only while gathered (zero3, fsdp); the master shard is the only copy
};

/// Where a group accumulates the gradients of the micro-batches of one step.
enum class GradHolding {
  kFull,   ///< a persistent [padded] float32 buffer on every rank; the master's grad is its chunk
  kShard,  ///< a [chunk] float32 shard: each micro-batch's gradients are reduced into it
};

struct FlatGroupOptions {
  int shard_rank = 0;  ///< this rank's position in the shard group
  int shard_size = 1;  ///< N: ranks the group is sharded over (1: not sharded)
  Residency residency = Residency::kPersistent;
  GradHolding grads = GradHolding::kFull;
  Precision precision;
  /// kGathered with N = 1: keep full() apart from the master anyway, allocated and all-gathered
  /// around each use as a sharded group's is (forced collectives: Comm::skips_collectives()).
  bool gather_unsharded = false;
};

/// One flat group of parameters and the state a rank holds for it (see the file comment).
class FlatGroup {
 public:
  /// Takes `params` over (trainable float32 leaves on one device, identical on every rank of the
  /// shard group; `names` their dotted names): copies them into the flat buffer, keeps this rank's
  /// chunk as the float32 master, points every parameter at its view of full() (set_data, so
  /// their old storage is freed once nothing else holds it) and, for kGathered, releases full().
  FlatGroup(std::vector<torch::Tensor> params, std::vector<std::string> names, FlatGroupOptions options);
  FlatGroup(const FlatGroup&) = delete;
  FlatGroup& operator=(const FlatGroup&) = delete;

  // ---- layout
  std::size_t size() const noexcept { return params_.size(); }
  const torch::Tensor& param(std::size_t k) const { return params_.at(k); }
  const std::string& name(std::size_t k) const { return names_.at(k); }
  const std::vector<std::string>& names() const noexcept { return names_; }
  std::int64_t numel() const noexcept { return numel_; }    ///< real elements
  std::int64_t padded() const noexcept { return padded_; }  ///< numel rounded up to a multiple of N
  std::int64_t chunk() const noexcept { return chunk_; }    ///< padded / N
  int shard_rank() const noexcept { return options_.shard_rank; }
  int shard_size() const noexcept { return options_.shard_size; }
  const FlatGroupOptions& options() const noexcept { return options_; }
  /// Chunk `r` of a [padded] tensor of this group (a view).
  torch::Tensor chunk_of(const torch::Tensor& flat, int r) const { return flat.narrow(0, r * chunk_, chunk_); }
  /// Views of a [padded] tensor shaped like each parameter, in order.
  std::vector<torch::Tensor> views(const torch::Tensor& flat) const;

  // ---- parameters
  /// [padded] in the parameter dtype; the parameters are views of it.
  const torch::Tensor& full() const noexcept { return full_; }
  /// Whether full()'s storage is allocated (always, for kPersistent).
  bool materialized() const;
  /// [chunk] float32, this rank's master: the optimizer's leaf. Its grad() is the gradient the
  /// optimizer reads (the chunk of the kFull buffer, or the kShard shard).
  const torch::Tensor& master() const noexcept { return master_; }
  /// True when master() is a view of full() (nothing to copy after a step, nothing to gather when
  /// N = 1).
  bool aliased() const noexcept { return aliased_; }
  /// kGathered: allocates full()'s storage (contents undefined until written) / releases it. A
  /// group whose master is full() itself is never released.
  void allocate_full();
  void release_full();
  /// This rank's chunk of the parameters in the parameter dtype: the input of the all-gather that
  /// fills full(). Persistent: that chunk of full() itself (the all-gather runs in place);
  /// gathered: the master in the parameter dtype, which does not overlap full().
  torch::Tensor gather_input() const;
  /// After an optimizer step: writes the master into this rank's chunk of full() (cast to the
  /// parameter dtype); nothing when they alias.
  void master_to_full();

  // ---- gradients
  /// kFull: the [padded] float32 accumulation buffer; undefined for kShard.
  const torch::Tensor& full_grad() const noexcept { return full_grad_; }
  /// The float32 gradient of parameter k (a view of full_grad()), kFull only.
  const torch::Tensor& grad_view(std::size_t k) const { return grad_views_.at(k); }
  /// From the grad-ready hook of parameter k: under kFull with a mixed policy, adds autograd's
  /// low-precision gradient into full_grad() and drops it, so accumulation over micro-batches is
  /// float32 (with a float32 policy autograd accumulates straight into the buffer's views).
  void accumulate(std::size_t k);
  /// kShard: this micro-batch's gradients as one [padded] tensor in `dtype`, zero for a parameter
  /// without a gradient and in the padding; autograd's gradients are dropped.
  torch::Tensor take_grads(torch::ScalarType dtype);
  /// Zeroes the gradients held (the buffer or the shard).
  void zero_grad();

  /// Tensors holding parameters / gradients now (for storage_bytes: a view counts with its base).
  std::vector<torch::Tensor> param_tensors() const { return {full_, master_}; }
  std::vector<torch::Tensor> grad_tensors() const { return {full_grad_, master_.grad()}; }

 private:
  std::vector<torch::Tensor> params_;
  std::vector<std::string> names_;
  std::vector<std::int64_t> offsets_;
  FlatGroupOptions options_;
  std::int64_t numel_ = 0;
  std::int64_t padded_ = 0;
  std::int64_t chunk_ = 0;
  bool aliased_ = false;
  torch::Tensor full_;
  torch::Tensor master_;
  torch::Tensor full_grad_;
  std::vector<torch::Tensor> grad_views_;
};

/// The groups a strategy holds, in its own order.
using FlatGroups = std::vector<std::unique_ptr<FlatGroup>>;
/// The master of every group (what the optimizer steps), and their gradients.
std::vector<torch::Tensor> group_masters(const FlatGroups& groups);
std::vector<torch::Tensor> group_master_grads(const FlatGroups& groups);
/// Bytes of parameter storage and of gradient storage the groups hold (each storage once).
std::pair<std::int64_t, std::int64_t> group_bytes(const FlatGroups& groups);
/// The group's float32 master in full ([padded], on its device): all-gathered over `shard` when
/// the group is sharded (a collective of the shard group), the master itself when it is not.
torch::Tensor full_master(const FlatGroup& group, Comm* shard);

/// The pieces of `groups` (this rank's master chunk of each, real elements only, not the padding)
/// and, when `optimizer` is given, of its state (its parameters must be the groups' masters).
std::vector<TensorPiece> flat_state_pieces(const FlatGroups& groups, Optimizer* optimizer, StateAccess access,
                                           const PieceOwner& owner);

}  // namespace strata::inline kit_v3
