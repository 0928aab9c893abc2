#include "strata/mesh.hpp"

#include <fmt/format.h>

#include "strata/errors.hpp"

namespace strata::inline kit_v3 {

namespace {
/// Job ranks [first, first + size).
std::vector<int> block(int first, int size) {
  std::vector<int> ranks;
  for (int r = first; r < first + size; ++r) ranks.push_back(r);
  return ranks;
}
}  // namespace

Mesh Mesh::over(const StrategySetup& setup, int shard_size, const std::string& owner, const std::string& option) {
  Mesh m;
  m.job_ = setup.comm;
  m.owner_ = owner;
  m.ranks_per_host_ = std::max(1, setup.local_world_size);
  const int world = m.job_->world_size();
  const int rank = m.job_->rank();
  if (shard_size == 1) {  // before the next case: at world size 1 the job replicates, as ddp's does
    m.local_ = make_local_comm(setup.device);
    m.shard_ = m.local_.get();
    m.replicate_ = m.job_;
  } else if (shard_size == 0 || shard_size == world) {
    m.shard_ = m.job_;
  } else {
    if (shard_size < 0 || world % shard_size != 0)
      throw Error(fmt::format("{}: a shard group of {} ranks does not divide the world size {} ([strategy] {}).",
                              owner, shard_size, world, option),
                  fmt::format("Set {} to a divisor of the number of ranks (the ranks per host by default).", option));
    std::vector<int> replica_ranks;
    for (int r = rank % shard_size; r < world; r += shard_size) replica_ranks.push_back(r);
    // Every rank creates its shard group first, then its replica group: the same order everywhere.
    m.shard_group_ = m.job_->subgroup(block(rank / shard_size * shard_size, shard_size));
    m.replicate_group_ = m.job_->subgroup(replica_ranks);
    m.shard_ = m.shard_group_.get();
    m.replicate_ = m.replicate_group_.get();
  }
  return m;
}

int Mesh::resolve_subgroup(int size, const std::string& option) const {
  const int n = shard_->world_size();
  if (size == 0) size = std::min(ranks_per_host_, n);
  if (size < 1 || n % size != 0)
    throw Error(fmt::format("{}: a sub-group of {} ranks does not divide the shard group of {} ([strategy] {}).",
                            owner_, size, n, option),
                fmt::format("Set {} to a divisor of {} (0: the ranks of one host).", option, n));
  return size;
}

Comm& Mesh::across_subgroups(int size, const std::string& option) {
  size = resolve_subgroup(size, option);
  for (auto& [s, comm] : across_)
    if (s == size) return *comm;
  const int n = shard_->world_size();
  std::shared_ptr<Comm> comm;
  if (size == n) {
    comm = make_local_comm(job_->device());
  } else if (size == 1) {
    comm = shard_->separate_stream();
  } else {
    const int first_job_rank = job_->rank() - shard_->rank();
    std::vector<int> ranks;
    for (int r = shard_->rank() % size; r < n; r += size) ranks.push_back(first_job_rank + r);
    comm = job_->subgroup(ranks);
  }
  across_.emplace_back(size, comm);
  return *comm;
}

Comm& Mesh::subgroup(int size, const std::string& option) {
  const int n = shard_->world_size();
  size = resolve_subgroup(size, option);
  for (auto& [s, comm] : subgroups_)
    if (s == size) return *comm;
  std::shared_ptr<Comm> comm;
  if (size == 1) {
    comm = make_local_comm(job_->device());
  } else if (size == n) {
    comm = shard_->separate_stream();  // a communicator of its own, so that its traffic is its own
  } else {
    // Members of the shard group are consecutive job ranks (shard group of the mesh).
    const int first_job_rank = job_->rank() - shard_->rank();
    comm = job_->subgroup(block(first_job_rank + shard_->rank() / size * size, size));
  }
  subgroups_.emplace_back(size, comm);
  return *comm;
}

std::string Mesh::describe() const {
  if (replicate_ == nullptr) return fmt::format("shard group of {}", shard_->world_size());
  if (shard_->world_size() == 1) return fmt::format("{} replicas", replicate_->world_size());
  return fmt::format("shard groups of {} x {} replicas", shard_->world_size(), replicate_->world_size());
}

}  // namespace strata::inline kit_v3
