#pragma once
/// \file mesh.hpp
/// The ranks of a job as named dimensions, for the engine's plans (plan.hpp): a `replicate` x
/// `shard` grid (torch's DeviceMesh with dims ("replicate", "shard"), as FSDP2's HSDP uses it),
/// plus sub-groups of the shard group (the ranks of one host, for ZeRO++ hpZ's secondary shard).
///
///   shard group     `shard_size` consecutive ranks: 0 or the world size: every rank (one shard
///                   group, nothing replicated: zero1-3, FULL_SHARD); 1: a one-rank group of its
///                   own (nothing sharded: ddp, NO_SHARD); else HYBRID_SHARD's groups
///   replicate group the ranks at the same position of every shard group (rank % shard_size,
///                   rank % shard_size + shard_size, ...); none when there is one shard group
///   sub-group       `size` consecutive members of the shard group (0: the ranks of one host)
///   across          the members at the same position of every sub-group of a size
///
/// Every rank builds the same mesh in the same order (its groups are created collectively), and
/// the mesh owns them: it must outlive everything that communicates over them.

#include <memory>
#include <string>
#include <vector>

#include "strata/comm.hpp"
#include "strata/kit.hpp"
#include "strata/strategy.hpp"

namespace strata::inline kit_v3 {

class Mesh {
 public:
  Mesh() = default;
  /// The job `setup.comm` cut into shard groups of `shard_size` ranks (see the file comment).
  /// Throws strata::Error naming `option` (the strategy option it came from, for the fix) when
  /// shard_size does not divide the world size.
  static Mesh over(const StrategySetup& setup, int shard_size, const std::string& owner,
                   const std::string& option = "shard_group_size");

  Comm& job() const noexcept { return *job_; }
  /// The ranks this rank's parameters, gradients and optimizer state are sharded over.
  Comm& shard() const noexcept { return *shard_; }
  /// The ranks holding the same shards as this one; null when there is one shard group.
  Comm* replicate() const noexcept { return replicate_; }
  /// Replicas (shard groups) and this rank's replica index.
  int replicas() const noexcept { return replicate_ != nullptr ? replicate_->world_size() : 1; }
  int replica() const noexcept { return replicate_ != nullptr ? replicate_->rank() : 0; }
  /// Ranks of this job on one host (StrategySetup::local_world_size).
  int ranks_per_host() const noexcept { return ranks_per_host_; }
  /// The sub-group of `size` consecutive members of the shard group that holds this rank (0: the
  /// ranks of one host, at most the shard group): a collective call the first time a size is
  /// asked for (every rank asks for the same sizes in the same order). Throws strata::Error naming
  /// `option` unless the size divides the shard group's.
  Comm& subgroup(int size, const std::string& option);
  /// The members of the shard group at this rank's position in every sub-group of `size` (as
  /// subgroup() resolves it): shard ranks j, j + size, j + 2 size, ... for this rank's j, one per
  /// host when the sub-groups are hosts. A collective call the first time a size is asked for.
  Comm& across_subgroups(int size, const std::string& option);
  /// The ranks of a sub-group of `size` (0: the ranks of one host, at most the shard group);
  /// throws as subgroup() does unless it divides the shard group. Not a collective call.
  int resolve_subgroup(int size, const std::string& option) const;
  /// "shard group of 2 x 2 replicas" and the like, for the log.
  std::string describe() const;

 private:
  Comm* job_ = nullptr;
  Comm* shard_ = nullptr;
  Comm* replicate_ = nullptr;
  int ranks_per_host_ = 1;
  std::string owner_;
  std::shared_ptr<Comm> shard_group_;      // HYBRID_SHARD
  std::shared_ptr<Comm> replicate_group_;  // HYBRID_SHARD
  std::unique_ptr<Comm> local_;            // shard_size 1
  std::vector<std::pair<int, std::shared_ptr<Comm>>> subgroups_;  // by size
  std::vector<std::pair<int, std::shared_ptr<Comm>>> across_;     // by sub-group size
};

}  // namespace strata::inline kit_v3
