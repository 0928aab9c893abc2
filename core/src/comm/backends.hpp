#pragma once
// The c10d backends a ProcessGroupComm runs on (comm/rendezvous.cpp, comm/subgroups.cpp), one
// factory each.

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "comm/process_group.hpp"

namespace strata::detail {

/// The job ranks of a communicator of `o` (every rank when not listed), as c10d takes them.
std::vector<std::uint64_t> global_ranks(const ProcessGroupOptions& o);
/// Names the communicator in c10d: its options (NCCL reads them for its logs and dumps) ...
template <class Options>
void name_group(Options& options, const ProcessGroupOptions& o) {
  options.group_name = o.group_name;
  options.global_ranks_in_group = global_ranks(o);
}
/// ... and the backend's group uid and description.
void name_backend(c10d::Backend& backend, const ProcessGroupOptions& o);

/// A Gloo backend over `store` for rank o.world.rank of o.world.world_size, listening where
/// gloo_interface says.
c10::intrusive_ptr<c10d::Backend> make_gloo(const ProcessGroupOptions& o, const c10::intrusive_ptr<c10d::Store>& store);
/// Where this rank's Gloo listens: "GLOO_SOCKET_IFNAME=..." or "NCCL_SOCKET_IFNAME=..." when set
/// (a plain list of interfaces), 127.0.0.1 for a loopback master or a job on one host, else the address of the
/// interface that routes to MASTER_ADDR; when the job spans hosts and that is loopback (this
/// host's name resolves to 127.0.x.x), the host's first real interface. Throws strata::Error when
/// a job that spans hosts finds no usable interface.
std::string gloo_interface(const ProcessGroupOptions& o);
/// Claims GPU `gpu` (its UUID) for this rank in `store` (a group's): NCCL refuses two ranks of one
/// communicator on one GPU ("Duplicate GPU") only once it builds the communicator, naming neither
/// rank's binding. The second rank to claim a GPU throws strata::Error naming both ranks, the GPU
/// and the launcher's variables that bound it, with the fix. Called by make_nccl before the
/// communicator exists.
void claim_gpu(c10d::Store& store, const std::string& gpu, const ProcessGroupOptions& o);
/// The variables through which a launcher binds this process to GPUs, as set ("CUDA_VISIBLE_DEVICES=1,
/// LOCAL_RANK=0"), for messages.
std::string gpu_binding_text();
/// An NCCL backend bound to this rank's GPU (`device`, completed from the local rank when it has no
/// index); throws strata::Error when LibTorch's CUDA library is not loaded (device/cuda_support.hpp),
/// this build has no NCCL or the GPU does not exist.
c10::intrusive_ptr<c10d::Backend> make_nccl(const ProcessGroupOptions& o, const c10::intrusive_ptr<c10d::Store>& store,
                                            torch::Device& device);
/// The NCCL backend's factory lives in libstrata_cuda (comm/nccl.cpp), which registers it as it loads.
using NcclFactory = c10::intrusive_ptr<c10d::Backend> (*)(const ProcessGroupOptions&,
                                                          const c10::intrusive_ptr<c10d::Store>&, torch::Device&);
void register_nccl(NcclFactory factory);
/// NCCL's flight recorder is libtorch_cuda's too: libstrata_cuda registers its two dumps (c10d's
/// dump_nccl_trace and dump_nccl_trace_json) for comm/flight_recorder.cpp, where Gloo's (c10d's
/// dump_fr_trace and dump_fr_trace_json, of the same signatures) fill the same struct.
struct NcclFlightRecorder {
  std::string (*dump)(bool include_collectives, bool include_stack_traces, bool only_active) = nullptr;
  std::string (*json)(bool include_collectives, bool only_active) = nullptr;
};
void register_nccl_flight_recorder(NcclFlightRecorder recorder);

}  // namespace strata::detail
