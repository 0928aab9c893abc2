// The c10d backends behind strata::Comm: Gloo (CPU tensors, or CUDA tensors staged through pinned
// host memory) and NCCL (CUDA tensors), and where Gloo listens. One of comm/'s translation units
// that include c10d headers (listed at the top of comm/process_group.cpp); checked against LibTorch 2.11.

#include "comm/backends.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "comm/comm_errors.hpp"
#include "comm/job_guard.hpp"
#include "device/cuda_support.hpp"
#include "strata/errors.hpp"

namespace strata::detail {

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

/// The address of this host's interface that routes to `host` (a UDP connect sends nothing; it
/// only picks the route), empty when `host` does not resolve or has no route.
std::string address_towards(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return {};
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, &::freeaddrinfo);
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t length = sizeof local;
    const bool ok = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
                    ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0;
    ::close(fd);
    char text[INET6_ADDRSTRLEN] = {};
    const void* raw = local.ss_family == AF_INET6
                          ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in6&>(local).sin6_addr)
                          : static_cast<const void*>(&reinterpret_cast<const sockaddr_in&>(local).sin_addr);
    if (ok && ::inet_ntop(local.ss_family, raw, text, sizeof text) != nullptr) return text;
  }
  return {};
}

/// The first up, non-loopback IPv4 interface (container bridges last): where rank 0 listens when
/// its own name, given as MASTER_ADDR, resolves to loopback on its host.
std::string first_host_address() {
  ifaddrs* all = nullptr;
  if (::getifaddrs(&all) != 0) return {};
  std::unique_ptr<ifaddrs, decltype(&::freeifaddrs)> list(all, &::freeifaddrs);
  std::string best, bridge;
  for (const ifaddrs* i = all; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET || (i->ifa_flags & IFF_UP) == 0 ||
        (i->ifa_flags & IFF_LOOPBACK) != 0)
      continue;
    char text[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof text);
    const std::string name = i->ifa_name;
    const bool container = name.rfind("docker", 0) == 0 || name.rfind("virbr", 0) == 0 || name.rfind("br-", 0) == 0;
    std::string& slot = container ? bridge : best;
    if (slot.empty()) slot = text;
  }
  return best.empty() ? bridge : best;
}

/// NCCL_SOCKET_IFNAME as interface names for Gloo: "eth0,eth1" or "=eth0"; an exclusion list
/// ("^docker") or a prefix match names no interface exactly, so it is left to the route.
std::vector<std::string> nccl_interfaces() {
  const char* value = std::getenv("NCCL_SOCKET_IFNAME");
  if (value == nullptr || *value == '\0' || *value == '^') return {};
  std::string list = *value == '=' ? value + 1 : value;
  std::vector<std::string> names;
  for (std::size_t start = 0; start <= list.size();) {
    const auto comma = std::min(list.find(',', start), list.size());
    if (comma > start) names.push_back(list.substr(start, comma - start));
    start = comma + 1;
  }
  if (*value != '=') {  // without '=', NCCL matches prefixes: only names of existing interfaces are exact
    for (const auto& n : names)
      if (::if_nametoindex(n.c_str()) == 0) return {};
  }
  return names;
}

std::string gloo_interface(const ProcessGroupOptions& o) {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname != nullptr && *ifname != '\0')
    return std::string("GLOO_SOCKET_IFNAME=") + ifname;
  if (const auto names = nccl_interfaces(); !names.empty())
    return std::string("NCCL_SOCKET_IFNAME=") + std::getenv("NCCL_SOCKET_IFNAME");
  // Every rank on this host (or a loopback master, which only this host reaches): peers connect
  // over loopback, and nothing listens where other hosts could reach it.
  const bool spans_hosts = !one_host(o.world);
  if (is_loopback(o.world.master_addr) || !spans_hosts) return "127.0.0.1";
  const std::string address = address_towards(o.world.master_addr, o.world.master_port);
  if (!address.empty() && !is_loopback(address)) return address;
  // This host's name resolves to loopback (Debian's /etc/hosts), or nothing routes to the
  // master: listen on the host's first real interface instead of one no peer can reach.
  if (auto host = first_host_address(); !host.empty()) return host;
  throw Error(rank_name(o.world) + ": no network interface of this host reaches MASTER_ADDR=" + o.world.master_addr +
                  " (it resolves to loopback here, or not at all) and the job spans hosts",
              "set MASTER_ADDR to rank 0's address as the other hosts reach it, or GLOO_SOCKET_IFNAME (and "
              "NCCL_SOCKET_IFNAME) to the interface the ranks share, e.g. eth0");
}

std::vector<std::uint64_t> global_ranks(const ProcessGroupOptions& o) {
  std::vector<std::uint64_t> ranks;
  if (o.global_ranks.empty())
    for (int r = 0; r < o.world.world_size; ++r) ranks.push_back(static_cast<std::uint64_t>(r));
  for (int r : o.global_ranks) ranks.push_back(static_cast<std::uint64_t>(r));
  return ranks;
}

void name_backend(c10d::Backend& backend, const ProcessGroupOptions& o) {
  backend.setGroupUid(o.group_name);
  backend.setGroupDesc("strata " + o.group_name);
}

c10::intrusive_ptr<c10d::Backend> make_gloo(const ProcessGroupOptions& o, const c10::intrusive_ptr<c10d::Store>& store) {
  // Where Gloo listens: GLOO_SOCKET_IFNAME (as torch.distributed), else NCCL_SOCKET_IFNAME's
  // interfaces, else the address of the interface that routes to MASTER_ADDR. Gloo's own default
  // (the address this host's name resolves to) is loopback on many hosts, and then peers on other
  // hosts cannot connect ("Connection refused remote=[127.0.0.1]").
  const std::string where = gloo_interface(o);
  c10::intrusive_ptr<c10d::ProcessGroupGloo::Options> gloo;
  if (where.rfind("GLOO_SOCKET_IFNAME=", 0) == 0) {
    gloo = c10d::ProcessGroupGloo::Options::create_default(o.timeout);
  } else if (where.rfind("NCCL_SOCKET_IFNAME=", 0) == 0) {
    gloo = c10d::ProcessGroupGloo::Options::create(o.timeout);
    for (const auto& name : nccl_interfaces())
      gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name));
    gloo->threads = static_cast<int>(gloo->devices.size()) * 2;
  } else {
    gloo = c10d::ProcessGroupGloo::Options::create(o.timeout);
    gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(where));
  }
  name_group(*gloo, o);
  auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, o.world.rank, o.world.world_size, gloo);
  name_backend(*pg, o);
  return pg;
}

std::string gpu_binding_text() {
  std::string text;
  for (const char* name : {"CUDA_VISIBLE_DEVICES", "LOCAL_RANK", "SLURM_LOCALID", "SLURM_STEP_GPUS",
                           "OMPI_COMM_WORLD_LOCAL_RANK"}) {
    const char* value = std::getenv(name);
    if (value == nullptr && std::string(name) != "CUDA_VISIBLE_DEVICES") continue;
    text += fmt::format("{}{}={}", text.empty() ? "" : ", ", name, value != nullptr ? value : "(unset)");
  }
  return text;
}

void claim_gpu(c10d::Store& store, const std::string& gpu, const ProcessGroupOptions& o) {
  const std::string who = fmt::format("{} ({})", rank_name(o.world), gpu_binding_text());
  const std::string holder_key = "gpu_holder/" + gpu;
  if (store.add("gpu_claims/" + gpu, 1) == 1) {
    store.set(holder_key, std::vector<std::uint8_t>(who.begin(), who.end()));
    return;
  }
  std::string holder = "another rank of this host";
  try {  // the first claimant writes its name right after its claim
    store.wait({holder_key}, std::chrono::milliseconds(10000));
    const auto bytes = store.get(holder_key);
    holder = std::string(bytes.begin(), bytes.end());
  } catch (const std::exception&) {
  }
  throw Error(fmt::format("{} and {} are bound to the same GPU ({}) in one NCCL communicator ({}), which NCCL refuses "
                          "(\"Duplicate GPU\").",
                          who, holder, gpu, o.group_name),
              "Give every rank a GPU of its own: make all of the host's GPUs visible to every rank (each then takes "
              "cuda:LOCAL_RANK), or set a different CUDA_VISIBLE_DEVICES for each rank (Slurm: --gpus-per-task=1 or "
              "--gpu-bind=single:1), or use distributed.backend = \"gloo\" to share a GPU");
}

namespace {
NcclFactory nccl_factory = nullptr;
}  // namespace

void register_nccl(NcclFactory factory) { nccl_factory = factory; }

c10::intrusive_ptr<c10d::Backend> make_nccl(const ProcessGroupOptions& o, const c10::intrusive_ptr<c10d::Store>& store,
                                            torch::Device& device) {
  // libstrata_cuda registers the factory as it loads (and says there when this build has no NCCL).
  if (nccl_factory != nullptr) return nccl_factory(o, store, device);
  throw Error(fmt::format("{}: backend \"nccl\" needs LibTorch's CUDA library, which is not loaded: {}.",
                          rank_name(o.world), cuda_support::why_absent()),
              "Use backend \"gloo\" (CPU tensors), or run on a machine with an NVIDIA GPU visible to this process.");
}

}  // namespace strata::detail
