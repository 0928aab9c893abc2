// `dp`: data parallel inside one process (PyTorch's nn.DataParallel). One process drives K
// devices, each with a replica of the model: every micro-batch is scattered along the batch
// dimension, the replicas run forward and backward concurrently (one thread per device), their
// gradients are reduced to device 0 after each micro-batch (as DataParallel's backward does) into
// its float32 accumulation buffers, device 0 takes the optimizer step, and the updated parameters
// are copied back to the other replicas.
//
// DataParallel re-replicates the module at every forward; the replicas here persist and receive
// the new parameters once per step, which is the same data movement for one micro-batch. LibTorch's
// torch::nn::parallel::replicate needs Cloneable modules and CUDA's broadcast, so the replicas come
// from StrategySetup::make_model and plain copies instead; that also gives CPU replicas, which
// make the strategy testable without GPUs. Everything moved between devices is booked to the
// job's counters: (K-1) x the parameter bytes to the replicas per step and (K-1) x the gradient
// bytes back per micro-batch.

#include <chrono>
#include <exception>
#include <optional>
#include <thread>

#include <c10/core/DeviceGuard.h>
#include <torch/cuda.h>
#include <fmt/format.h>

#include <strata/errors.hpp>
#include <strata/plugin.hpp>
#include <strata/replica.hpp>

namespace {

struct DpOptions {
  std::int64_t replicas = 0;          ///< model replicas (devices) in this process; 0: every GPU, or 2 on the CPU
  std::vector<std::string> devices;  ///< explicit devices; empty: derived from the run's device
};

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

class DpStrategy final : public strata::ReplicaStrategy, public strata::MultiDevice {
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
    if (s.comm->world_size() != 1)
      throw strata::Error(fmt::format("dp runs in one process, but this job has {} ranks.", s.comm->world_size()),
                          "Run dp with nproc = 1 and set strategy.replicas to the number of devices.");
    if (!s.make_model)
      throw strata::Error("dp needs StrategySetup::make_model to build its replicas; this host gives none.",
                          "Run dp under the strata CLI, which provides it.");
    devices_ = resolve_devices(s.device);
    strata::StrategySetup primary = s;
    primary.device = devices_.front();
    take_over(primary);  // the model, its masters and the optimizer live on device 0
    replicas_.push_back(model_);
    replica_params_.push_back(params_);
    for (std::size_t k = 1; k < devices_.size(); ++k) {
      auto replica = s.make_model();
      replica->to(devices_[k]);
      if (precision_.mixed()) replica->to(precision_.param_dtype());
      std::vector<torch::Tensor> trainable;
      for (auto& [name, p] : strata::unique_trainable_parameters(*replica)) trainable.push_back(p);
      if (trainable.size() != params_.size())
        throw strata::Error("dp: a replica built by the model plugin has a different number of parameters.",
                            "The model factory must build the same architecture every time.");
      replicas_.push_back(std::move(replica));
      replica_params_.push_back(std::move(trainable));
    }
    copy_to_replicas();  // booked to setup, like the broadcast of the other strategies
    if (devices_.front().is_cpu() && devices_.size() > 1) {
      // The replicas' threads share the process's intra-op threads: split them, as the launcher
      // does for the ranks of one host.
      const int threads = std::max(1, torch::get_num_threads() / static_cast<int>(devices_.size()));
      torch::set_num_threads(threads);
    }
    std::string names;
    for (const auto& d : devices_) names += (names.empty() ? "" : ", ") + d.str();
    s.log->info(fmt::format("dp: {} replicas on {} ({} intra-op threads each on the CPU)", devices_.size(), names,
                            torch::get_num_threads()));
  }

  int devices_per_rank() const override { return static_cast<int>(devices_.size()); }

  torch::Tensor forward_backward(const strata::Batch& batch, strata::MicroStep micro) override {
    const auto k = static_cast<std::int64_t>(replicas_.size());
    const std::int64_t n = batch.size();
    std::vector<torch::Tensor> losses(replicas_.size());  // each chunk's summed loss, on its device
    std::vector<std::exception_ptr> errors(replicas_.size());
    auto run = [&](std::size_t r) {
      try {
        // torch::tensor_split's cut: the first n % k chunks take one example more.
        const auto i = static_cast<std::int64_t>(r);
        const auto lo = i * (n / k) + std::min(i, n % k), hi = lo + n / k + (i < n % k ? 1 : 0);
        if (hi == lo) return;
        std::optional<c10::DeviceGuard> guard;
        if (!devices_[r].is_cpu()) guard.emplace(devices_[r]);
        auto& replica = *replicas_[r];
        replica.train();
        const strata::Batch chunk = batch.slice(lo, hi).to(devices_[r], /*non_blocking=*/true);
        auto x = precision_.compute(chunk.inputs);
        auto output = strata::Precision::output(replica.forward(x, strata::BatchContext::of(chunk)));
        auto loss = replica.loss(output, chunk);
        // Summed losses times the global scale: the replicas' summed gradients equal single's.
        strata::MicroStep mine = micro;
        mine.loss_scale = micro.loss_scale.to(devices_[r], /*non_blocking=*/true);
        mine.scaled(loss).backward();
        losses[r] = loss.detach();
      } catch (...) {
        errors[r] = std::current_exception();
      }
    };
    reducer_->begin_backward(micro);  // device 0's replica: float32 accumulation hooks
    std::vector<std::thread> threads;
    for (std::size_t r = 1; r < replicas_.size(); ++r) threads.emplace_back(run, r);
    run(0);
    for (auto& t : threads) t.join();
    for (const auto& e : errors)
      if (e) std::rethrow_exception(e);
    reducer_->end_backward(micro);
    reduce_to_primary();
    torch::Tensor sum;
    for (const auto& l : losses)
      if (l.defined()) sum = sum.defined() ? sum + l.to(devices_.front()) : l.to(devices_.front());
    return sum;
  }

  void step(double lr) override {
    ReplicaStrategy::step(lr);
    copy_to_replicas();
  }

  void state_loaded() override {
    ReplicaStrategy::state_loaded();
    copy_to_replicas();
  }

  std::vector<std::uint32_t> replica_digests() const override {
    std::vector<std::uint32_t> out;
    for (const auto& replica : replicas_) {
      std::uint32_t crc = 0;
      for (const auto& t : replica->parameters()) crc = strata::tensor_digest(t, crc);
      for (const auto& t : replica->buffers()) crc = strata::tensor_digest(t, crc);
      out.push_back(crc);
    }
    return out;
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

  /// Adds every other replica's gradients of this micro-batch into device 0's float32 buffers (in
  /// the policy's reduce dtype on the way) and drops them.
  void reduce_to_primary() {
    if (replicas_.size() == 1) return;
    const auto start = Clock::now();
    torch::NoGradGuard no_grad;
    std::int64_t bytes = 0;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      for (std::size_t r = 1; r < replicas_.size(); ++r) {
        auto& g = replica_params_[r][i].mutable_grad();
        if (!g.defined()) continue;
        auto wire = precision_.wire(g);
        if (r == 1) bytes += static_cast<std::int64_t>(wire.nbytes());
        grad_view(i).add_(wire.to(devices_.front(), /*non_blocking=*/true));
        g = torch::Tensor();
      }
    }
    book(bytes, start);
  }

  /// Copies the primary's parameters and buffers to the other replicas.
  void copy_to_replicas() {
    if (replicas_.size() == 1) return;
    const auto start = Clock::now();
    torch::NoGradGuard no_grad;
    const auto buffers = model_->buffers();
    std::int64_t bytes = 0;
    for (const auto& p : params_) bytes += p.nbytes();
    for (const auto& b : buffers) bytes += b.nbytes();
    for (std::size_t r = 1; r < replicas_.size(); ++r) {
      for (std::size_t i = 0; i < params_.size(); ++i) replica_params_[r][i].copy_(params_[i], /*non_blocking=*/true);
      auto theirs = replicas_[r]->buffers();
      for (std::size_t i = 0; i < buffers.size(); ++i) theirs[i].copy_(buffers[i]);
    }
    book(bytes, start);
  }

  /// One transfer of `bytes` (one replica's worth) to or from each of the K-1 other devices.
  void book(std::int64_t bytes, Clock::time_point start) {
    const auto others = static_cast<double>(replicas_.size() - 1);
    comm_->book(bytes, others * static_cast<double>(bytes), seconds_since(start));
  }

  static constexpr std::int64_t kCpuReplicas = 2;  ///< replicas = 0 on a CPU run
  DpOptions options_;
  std::vector<torch::Device> listed_;  ///< parsed `devices`
  std::vector<torch::Device> devices_;
  std::vector<std::shared_ptr<strata::Model>> replicas_;    ///< replicas_[0] is model_ (device 0)
  std::vector<std::vector<torch::Tensor>> replica_params_;  ///< trainable parameters per replica
};

void register_dp(strata::Registry& registry) {
  strata::Schema<DpOptions> schema;
  schema
      .option("replicas", &DpOptions::replicas,
              "replicas in this process: cuda:0..N-1 on a CUDA run, N CPU replicas on a CPU run; 0 = every "
              "visible GPU on a CUDA run (nn.DataParallel's default), 2 on the CPU",
              strata::at_least(0))
      .option("devices", &DpOptions::devices, "explicit devices, e.g. [\"cuda:0\", \"cuda:1\"]; replaces replicas (left at 0 or equal to their number)");
  registry.add_strategy("dp", "one process, replicas on several devices; gradients reduced to device 0",
                        std::move(schema), [](const DpOptions& o) { return std::make_shared<DpStrategy>(o); },
                        // Device 0 holds single's state; its traffic is copies, not DESIGN §8 collectives.
                        {strata::Placement::devices_in_process("replicas"), {},
                         strata::Footprint{strata::Footprint::Memory{}, std::nullopt}});
}

}  // namespace

STRATA_PLUGIN(strategy, "dp", "0.1.0", register_dp)
