// `dp`: data parallel inside one process (PyTorch's nn.DataParallel). One process drives K
// devices, each with a replica of the model: every micro-batch is scattered along the batch
// dimension, the replicas run forward and backward concurrently (one thread per device), their
// gradients are reduced to device 0 after each micro-batch (as DataParallel's backward does) into
// its float32 accumulation buffers, device 0 takes the optimizer step, and the updated parameters
// are copied back to the other replicas: the kit's engine with a replicate dimension inside the
// process (strata::DeviceReplicaEngine, kit/include/strata/device_replicas.hpp), whose gradients
// stay local to the process. This file chooses the devices.
//
// DataParallel re-replicates the module at every forward; the replicas here persist and receive
// the new parameters once per step, which is the same data movement for one micro-batch. LibTorch's
// torch::nn::parallel::replicate needs Cloneable modules and CUDA's broadcast, so the replicas come
// from StrategySetup::make_model and plain copies instead; that also gives CPU replicas, which
// make the strategy testable without GPUs. Everything moved between devices is booked to the
// job's counters: (K-1) x the parameter bytes to the replicas per step and (K-1) x the gradient
// bytes back per micro-batch.

#include <torch/cuda.h>
#include <torch/utils.h>
#include <fmt/format.h>

#include <strata/device_replicas.hpp>
#include <strata/errors.hpp>
#include <strata/plugin.hpp>

namespace {

struct DpOptions {
  std::int64_t replicas = 0;          ///< model replicas (devices) in this process; 0: every GPU, or 2 on the CPU
  std::vector<std::string> devices;  ///< explicit devices; empty: derived from the run's device
};

class DpStrategy final : public strata::DeviceReplicaEngine {
 public:
  /// Checks the options (OptionError: reported at the option's line of the experiment).
  explicit DpStrategy(DpOptions options) : options_(std::move(options)) {
    if (options_.devices.empty()) return;
    if (options_.replicas != 0 && options_.replicas != static_cast<std::int64_t>(options_.devices.size()))
      throw strata::OptionError("replicas",
                                fmt::format("replicas = {} disagrees with the {} devices listed.", options_.replicas,
                                            options_.devices.size()),
                                "Give either devices or replicas, not both.");
    for (const auto& name : options_.devices) {
      try {
        listed_.emplace_back(name);
      } catch (const std::exception&) {
        throw strata::OptionError("devices", "\"" + name + "\" is not a device.",
                                  "Write devices like \"cuda:0\" or \"cpu\".");
      }
    }
  }

  void setup(const strata::StrategySetup& s) override {
    strata::Plan plan;
    plan.owner = "dp";
    plan.reduce = false;  // the replicas' gradients meet in device 0's buffers, not in a collective
    take_over_devices(s, resolve_devices(s.device), plan);
    std::string names;
    for (const auto& d : devices_) names += (names.empty() ? "" : ", ") + d.str();
    s.log->info(fmt::format("dp: {} replicas on {} ({} intra-op threads each on the CPU)", devices_.size(), names,
                            torch::get_num_threads()));
  }

 private:
  /// The replicas' devices: `devices`, else `replicas` of them derived from the run's device
  /// (cuda:0..K-1 for a CUDA run, K CPU replicas for a CPU run); replicas = 0 means every visible
  /// GPU (nn.DataParallel's default), or 2 replicas on the CPU.
  std::vector<torch::Device> resolve_devices(const torch::Device& run_device) const {
    std::vector<torch::Device> devices = listed_;
    const auto available = static_cast<int>(torch::cuda::device_count());
    const std::int64_t replicas =
        options_.replicas > 0 ? options_.replicas : run_device.is_cuda() ? std::max(1, available) : kCpuReplicas;
    for (std::int64_t k = 0; listed_.empty() && k < replicas; ++k)
      devices.push_back(run_device.is_cuda() ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(k))
                                             : torch::Device(torch::kCPU));
    for (const auto& d : devices)
      if (d.is_cuda() && d.index() >= available)
        throw strata::Error(fmt::format("dp: replica device {} does not exist; this machine has {} CUDA device(s).",
                                        d.str(), available),
                            "Use at most as many replicas as there are GPUs (strategy.replicas).");
    return devices;
  }

  static constexpr std::int64_t kCpuReplicas = 2;  ///< replicas = 0 on a CPU run
  DpOptions options_;
  std::vector<torch::Device> listed_;  ///< parsed `devices`
};

/// One process driving K = world size replicas: every micro-batch's gradients copied to device 0
/// ((K-1) copies, one device-to-device link each), device 0's optimizer step, its parameters copied
/// back to the replicas. The copies are not collectives over ranks; they are declared as broadcasts
/// over a pair of devices, the way they load one link.
strata::Schedule dp_schedule(const DpOptions&, const strata::ScheduleInput& in) {
  strata::Schedule s;
  const int k = std::max(1, in.topology.world_size);
  const double psi = in.parameters();
  const double param_bytes = in.param_bytes < 4 ? in.param_bytes + 4.0 : 4.0;
  std::vector<int> reduces;
  for (int m = 0; m < std::max(1, in.micro_batches); ++m) {
    for (std::size_t u = 0; u < in.units.size(); ++u)
      s.compute(fmt::format("forward {} (micro {})", u, m), in.units[u].forward_s);
    int last = -1;
    for (std::size_t u = in.units.size(); u-- > 0;)
      last = s.compute(fmt::format("backward {} (micro {})", u, m), in.units[u].backward_s);
    if (k > 1)
      reduces.push_back(s.collective(fmt::format("gradients to device 0 (micro {})", m), strata::Collective::kBroadcast,
                                     (k - 1) * psi * 4.0, 2, last >= 0 ? std::vector<int>{last} : std::vector<int>{}));
  }
  const int opt = s.compute("optimizer", in.optimizer_s, reduces);
  if (k > 1)
    s.collective("parameters to the replicas", strata::Collective::kBroadcast, (k - 1) * psi * in.param_bytes, 2, {opt});
  s.memory.params = psi * param_bytes;
  s.memory.grads = psi * 4.0;
  s.memory.optimizer = psi * in.optimizer_bytes;
  s.memory.buffers = k > 1 ? psi * 4.0 : 0.0;  // a replica's gradients arriving on device 0
  s.memory.transient_step = psi * 4.0;
  // On the CPU every replica lives in the process's memory: K-1 more parameters and gradients.
  if (in.cpu && k > 1) s.memory.process_extra = (k - 1) * (psi * param_bytes + psi * 4.0);
  s.data_share = 1.0;  // the one process loads the whole batch
  s.note = "one process: replicas on devices of one node";
  return s;
}

void register_dp(strata::Registry& registry) {
  strata::Schema<DpOptions> schema;
  schema
      .option("replicas", &DpOptions::replicas,
              "replicas in this process: cuda:0..N-1 on a CUDA run, N CPU replicas on a CPU run; 0 = every "
              "visible GPU on a CUDA run (nn.DataParallel's default), 2 on the CPU",
              strata::at_least(0))
      .option("devices", &DpOptions::devices, "explicit devices, e.g. [\"cuda:0\", \"cuda:1\"]; replaces replicas (left at 0 or equal to their number)");
  registry.add_strategy("dp", "one process, replicas on several devices; gradients reduced to device 0",
                        schema, [](const DpOptions& o) { return std::make_shared<DpStrategy>(o); },
                        strata::Placement::devices_in_process("replicas"));
  registry.set_schedule("dp", schema, dp_schedule);
}

}  // namespace

STRATA_PLUGIN(strategy, "dp", "0.1.0", register_dp)
