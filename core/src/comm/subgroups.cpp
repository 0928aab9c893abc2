// Subgroups and separate streams of a communicator: each a new c10d communicator (a Gloo or NCCL
// backend of its own) over some of the job's ranks, named in c10d, rendezvousing under a prefix of
// the process group's store that every member computes alike, and sharing the job's counters.
// Includes c10d headers: see comm/process_group.cpp.

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "comm/backends.hpp"
#include "comm/c10d_comm.hpp"
#include "comm/comm_errors.hpp"
#include "strata/errors.hpp"

namespace strata::detail {

std::shared_ptr<Comm> C10dComm::subgroup(const std::vector<int>& ranks) {
  bool ok = std::find(ranks.begin(), ranks.end(), global_rank_) != ranks.end() &&
            std::is_sorted(ranks.begin(), ranks.end()) && std::adjacent_find(ranks.begin(), ranks.end()) == ranks.end();
  for (int r : ranks) ok = ok && std::binary_search(members_.begin(), members_.end(), r);
  if (!ok) {
    throw Error(fmt::format("{}: subgroup ranks must be ascending, distinct job ranks of this group [{}] that include "
                            "this rank; got [{}]",
                            who_, fmt::join(members_, ","), fmt::join(ranks, ",")));
  }
  return make_group(ranks, "subgroup");
}

std::shared_ptr<Comm> C10dComm::separate_stream() {
  if (!options_.device.is_cuda()) return std::shared_ptr<Comm>(std::shared_ptr<Comm>{}, this);
  return make_group(members_, "stream");
}

std::shared_ptr<Comm> C10dComm::make_group(const std::vector<int>& ranks, const char* what) {
  ProcessGroupOptions o = options_;
  o.world.rank = static_cast<int>(std::find(ranks.begin(), ranks.end(), global_rank_) - ranks.begin());
  o.world.world_size = static_cast<int>(ranks.size());
  const std::string members = fmt::format("{}", fmt::join(ranks, ","));
  // Every rank creates its communicators in the same order, so the count names the same group
  // on every member (the member list tells apart groups created at the same position).
  const int index = accounting_->next_group();
  auto store = c10::make_intrusive<c10d::PrefixStore>(fmt::format("{}{}/{}", what, index, members), pg_store_);
  const std::string who = fmt::format("{} ({} [{}])", who_, what, members);
  o.group_name = fmt::format("{}{}:{}", what, index, members);
  o.global_ranks = ranks;
  c10::intrusive_ptr<c10d::Backend> backend;
  try {
    backend = o.backend == "nccl" ? make_nccl(o, store, o.device) : make_gloo(o, store);
  } catch (const Error&) {
    throw;
  } catch (...) {
    throw group_creation_failed(global_rank_, who, o.backend, what);
  }
  return std::make_shared<C10dComm>(o, kv_store_, pg_store_, backend, ranks, global_rank_, who, accounting_);
}

}  // namespace strata::detail
