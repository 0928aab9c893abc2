// libstrata_cuda: the NCCL backend of strata::Comm. It needs libtorch_cuda (ProcessGroupNCCL),
// which libstrata_core does not link: libstrata_core opens this library at start on a machine with
// an NVIDIA GPU (device/cuda_support.cpp), and this file registers its factory with make_nccl
// (comm/backends.hpp) as it loads. One of comm/'s translation units that include c10d headers
// (listed at the top of comm/process_group.cpp); checked against LibTorch 2.11.

#include <string>

#include <fmt/format.h>

// NCCL needs LibTorch's NCCL build (USE_C10D_NCCL comes from the torch_cuda target) and the CUDA
// and NCCL headers; without them the factory says so at run time.
#if defined(USE_C10D_NCCL) && __has_include(<nccl.h>) && __has_include(<cuda_runtime_api.h>)
#define STRATA_HAVE_NCCL 1
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#include <torch/csrc/distributed/c10d/NCCLUtils.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "comm/backends.hpp"
#include "comm/comm_errors.hpp"
#include "strata/errors.hpp"

namespace strata::detail {

namespace {

c10::intrusive_ptr<c10d::Backend> nccl_backend(const ProcessGroupOptions& o, const c10::intrusive_ptr<c10d::Store>& store,
                                               torch::Device& device) {
#ifdef STRATA_HAVE_NCCL
  // The c10d classes' layout depends on nccl.h's version macros: the header we compiled against
  // must match the NCCL that LibTorch loaded, or constructing them corrupts memory.
  const int runtime = static_cast<int>(c10d::getNcclVersionNumber());
  if (runtime / 100 != NCCL_VERSION_CODE / 100) {
    throw Error("Strata was compiled against nccl.h " + std::to_string(NCCL_VERSION_CODE) +
                    " but LibTorch loaded NCCL " + c10d::getNcclVersion(),
                "rebuild with the nccl.h of LibTorch's NCCL (the nvidia-nccl Python package's include directory) "
                "first on the include path");
  }
  const int devices = c10::cuda::device_count();
  const int index = device.has_index() ? device.index() : o.world.local_rank;
  if (index >= devices) {
    throw Error(rank_name(o.world) + ": backend \"nccl\" needs CUDA device " + std::to_string(index) +
                    " (local rank " + std::to_string(o.world.local_rank) + ") but " + std::to_string(devices) +
                    " are visible",
                "run at most one rank per GPU on each host, or use backend \"gloo\" with CPU tensors");
  }
  device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
  c10::cuda::set_device(device.index());
  if (cudaDeviceProp prop{}; cudaGetDeviceProperties(&prop, index) == cudaSuccess) {
    std::string uuid = "GPU-";
    for (const char byte : prop.uuid.bytes) uuid += fmt::format("{:02x}", static_cast<unsigned char>(byte));
    claim_gpu(*store, uuid, o);
  } else {
    (void)cudaGetLastError();  // no identity to compare: NCCL's own check remains
  }
  // Collectives on high-priority streams: when compute kernels fill the SMs, the scheduler starts
  // NCCL's kernels first, so a gather or reduction issued ahead is not queued behind the compute it
  // is meant to overlap (FSDP2 issues its collectives from high-priority streams for this reason).
  auto nccl = c10d::ProcessGroupNCCL::Options::create(/*is_high_priority_stream=*/true);
  nccl->timeout = o.timeout;
  name_group(*nccl, o);
  auto pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, o.world.rank, o.world.world_size, nccl);
  name_backend(*pg, o);
  pg->setBoundDeviceId(device);  // one GPU per process: lets NCCL create its communicator now
  pg->eagerConnectSingleDevice(device);
  return pg;
#else
  (void)store;
  (void)device;
  throw Error(rank_name(o.world) + ": backend \"nccl\" is not available in this build of Strata (LibTorch without "
                  "NCCL, or no CUDA/NCCL headers at compile time)",
              "use backend \"gloo\" with CPU tensors, or rebuild on a machine with CUDA and NCCL headers and a CUDA "
              "build of LibTorch");
#endif
}

/// Registers the factory as the library loads (dlopen runs this before it returns).
const bool registered = [] {
  register_nccl(&nccl_backend);
#ifdef STRATA_HAVE_NCCL
  register_nccl_flight_recorder({&c10d::dump_nccl_trace, &c10d::dump_nccl_trace_json});
#endif
  return true;
}();

}  // namespace

}  // namespace strata::detail
