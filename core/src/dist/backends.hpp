#pragma once
// The c10d backends a ProcessGroupComm runs on (dist/process_group.cpp), one factory each.

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "dist/process_group.hpp"

namespace strata::detail {

/// A Gloo backend over `store` for rank o.world.rank of o.world.world_size: bound to 127.0.0.1 for
/// a loopback master (unless GLOO_SOCKET_IFNAME is set), else to the interface torch.distributed
/// would choose.
c10::intrusive_ptr<c10d::Backend> make_gloo(const ProcessGroupOptions& o, const c10::intrusive_ptr<c10d::Store>& store);
/// An NCCL backend bound to this rank's GPU (`device`, completed from the local rank when it has no
/// index); throws strata::Error when this build has no NCCL or the GPU does not exist.
c10::intrusive_ptr<c10d::Backend> make_nccl(const ProcessGroupOptions& o, const c10::intrusive_ptr<c10d::Store>& store,
                                            torch::Device& device);

}  // namespace strata::detail
