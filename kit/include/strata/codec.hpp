#pragma once
/// \file codec.hpp
/// How a plan's tensors travel when a strategy changes what goes on the wire (ZeRO++'s quantized
/// communication): a GatherCodec for the parameters a sharded unit gathers (qwZ), a ReduceCodec for
/// the gradients its shards are reduced from (qgZ). A plan names them (Plan::gather_codec,
/// Plan::reduce_codec); the engine runs them inside its own gathers and reductions (prefetch,
/// overlap and buffers in flight stay the engine's), and the plan's schedule asks them for their
/// wire bytes, so `strata check` and `strata estimate` count what really travels.
///
/// A lossy codec changes what forward and backward compute or what the optimizer steps with (the
/// masters stay float32): declare the strategy's Equivalence for it.

#include <cstdint>
#include <string>

#include <torch/types.h>

#include "strata/kit.hpp"

namespace strata::inline kit_v3 {

/// How a sharded unit's parameters travel when gathered (Plan::gather_codec): what each rank
/// sends, how the full parameters are rebuilt from what arrives, and the bytes on the wire. Every
/// gather of a unit goes through it, over the shard group and from a sub-group copy
/// (Reshard::kSubgroup) alike, as DeepSpeed's ZeRO++ quantizes both; nothing travels on one rank.
/// encode() runs when a gather is issued, decode() on the compute stream when the unit waits for it.
class GatherCodec {
 public:
  virtual ~GatherCodec() = default;
  /// What this rank sends for `shard`, its chunk of a flat group's parameters (1-D, parameter
  /// dtype; the same number of elements on every rank): one 1-D tensor whose size depends only on
  /// that number.
  virtual torch::Tensor encode(const torch::Tensor& shard) = 0;
  /// Writes the full flat parameters (1-D, `ranks` x the shard's elements) into `full` from
  /// `gathered`, the ranks' encoded tensors concatenated in rank order.
  virtual void decode(const torch::Tensor& gathered, torch::Tensor& full, int ranks) = 0;
  /// Bytes encode() produces for a shard of `elements` elements of `element_bytes` bytes each.
  virtual double wire_bytes(double elements, double element_bytes) const = 0;
  /// The element type on the wire, named in the schedule ("int8", ...).
  virtual std::string wire_dtype() const = 0;
};

/// How sharded gradients travel when they are reduced (Plan::reduce_codec; GradHolding::kShard,
/// the gradients of zero2, zero3 and fsdp): in place of a reduce-scatter, each rank encodes the
/// chunk of its gradients that every rank owns, one row per destination, the rows are exchanged by
/// all-to-all and each rank decodes what it received and sums it in float32 (ZeRO++ qgZ, section
/// 3.3). With a sub-group (Plan::reduce_subgroup) the exchange is hierarchical: an all-to-all inside
/// the sub-group, whose rows are decoded, summed and encoded again, then one across the sub-groups,
/// so that what crosses hosts is 1/k of the flat exchange's. The result is the average of the
/// ranks' gradients, laid out as the reduce-scatter's.
class ReduceCodec {
 public:
  virtual ~ReduceCodec() = default;
  /// `rows`: [R, C] gradients (the reduce dtype), one row per destination. Returns [R, W]: each
  /// row encoded on its own, W depending only on C.
  virtual torch::Tensor encode(const torch::Tensor& rows) = 0;
  /// [R, W] as encode() made them, back to [R, `columns`] float32.
  virtual torch::Tensor decode(const torch::Tensor& rows, std::int64_t columns) = 0;
  /// Bytes of one encoded row of `elements` elements.
  virtual double wire_bytes(double elements) const = 0;
  /// The element type on the wire, named in the schedule ("int8", "int4", ...).
  virtual std::string wire_dtype() const = 0;
};

}  // namespace strata::inline kit_v3
