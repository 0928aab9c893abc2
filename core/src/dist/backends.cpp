// The c10d backends behind strata::Comm: Gloo (CPU tensors, or CUDA tensors staged through pinned
// host memory) and NCCL (CUDA tensors). Apart from process_group.cpp, the only translation unit
// that includes c10d headers; checked against LibTorch 2.11.

#include "dist/backends.hpp"

#include <cstdlib>

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

// NCCL needs LibTorch's NCCL build (USE_C10D_NCCL comes from the torch_cuda target) and the CUDA
// and NCCL headers; without them the "nccl" backend fails at runtime with a clear error.
#if defined(USE_C10D_NCCL) && __has_include(<nccl.h>) && __has_include(<cuda_runtime_api.h>)
#define STRATA_HAVE_NCCL 1
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/NCCLUtils.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "strata/errors.hpp"

namespace strata::detail {

namespace {
std::string rank_name(const WorldInfo& w) {
  return "rank " + std::to_string(w.rank) + " of " + std::to_string(w.world_size);
}
}  // namespace

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

c10::intrusive_ptr<c10d::Backend> make_gloo(const ProcessGroupOptions& o, const c10::intrusive_ptr<c10d::Store>& store) {
  // Device: with a loopback master every rank is on this host, so bind to 127.0.0.1; this works
  // even where the hostname does not resolve or resolves to an interface peers cannot reach.
  // Otherwise do what torch.distributed does (create_default): GLOO_SOCKET_IFNAME if set, else
  // the address this host's name resolves to, so ranks on other hosts can connect.
  c10::intrusive_ptr<c10d::ProcessGroupGloo::Options> gloo;
  if (is_loopback(o.world.master_addr) && std::getenv("GLOO_SOCKET_IFNAME") == nullptr) {
    gloo = c10d::ProcessGroupGloo::Options::create(o.timeout);
    gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  } else {
    gloo = c10d::ProcessGroupGloo::Options::create_default(o.timeout);
  }
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, o.world.rank, o.world.world_size, gloo);
}

c10::intrusive_ptr<c10d::Backend> make_nccl(const ProcessGroupOptions& o, const c10::intrusive_ptr<c10d::Store>& store,
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
  auto nccl = c10d::ProcessGroupNCCL::Options::create();
  nccl->timeout = o.timeout;
  auto pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, o.world.rank, o.world.world_size, nccl);
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

}  // namespace strata::detail
