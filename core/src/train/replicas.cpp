#include "train/replicas.hpp"

#include <vector>

#include <torch/types.h>

#include "strata/strategy.hpp"

namespace strata {

/// Gathers every rank's replica digests (ReplicaDigest strategies) into the summary and warns
/// when two replicas differ: they must stay identical bit for bit.
void check_replicas(const Strategy& strategy, Comm& comm, const Logger& log, Json& summary) {
  const auto* replicated = dynamic_cast<const ReplicaDigest*>(&strategy);
  if (replicated == nullptr) return;
  const auto mine = replicated->replica_digests();
  if (mine.empty()) return;  // every rank says so alike: nothing replicated to compare
  std::vector<std::int64_t> values(mine.begin(), mine.end());
  auto local = torch::tensor(values, torch::kInt64).to(comm.device());
  auto all = torch::empty({local.numel() * comm.world_size()}, local.options());
  comm.set_phase(CommPhase::kEval);
  comm.all_gather(all, local);
  comm.set_phase(CommPhase::kTrain);
  all = all.to(torch::kCPU);
  Json digests = Json::array();
  bool equal = true;
  for (std::int64_t i = 0; i < all.numel(); ++i) {
    const auto d = all[i].item<std::int64_t>();
    digests.push_back(Json(d));
    equal = equal && d == all[0].item<std::int64_t>();
  }
  summary["replica_digests"] = digests;
  summary["replicas_equal"] = equal;
  if (!equal) log.warn("the replicas of the model differ between ranks or devices at the end of training "
                      "(replica_digests in summary.json); the strategy let them drift apart");
}

}  // namespace strata
