#pragma once
// The end-of-run check that replicated strategies kept their replicas identical.

#include "io/json.hpp"
#include "strata/comm.hpp"
#include "strata/logger.hpp"
#include "strata/strategy.hpp"

namespace strata {

/// Gathers every rank's replica digests (ReplicaDigest strategies; a collective of every rank)
/// into summary["replica_digests"] and ["replicas_equal"], and warns when two differ.
void check_replicas(const Strategy& strategy, Comm& comm, const Logger& log, Json& summary);

}  // namespace strata
