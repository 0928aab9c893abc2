// On a GPU (label `gpu`): the Comm contract on CUDA (device check, stream-ordered waits, blocking
// host waits over NCCL), a training step of every strategy queued without a host sync, and the
// caching allocator's figures behind peak_tensor_bytes. Without a CUDA device every case says so
// and exits 77 (CTest: skipped).
#include "test_support.hpp"
#include "gpu_support.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/cuda.h>

#include "ckpt/piece_bytes.hpp"
#include "data/sampler.hpp"
#include "comm/process_group.hpp"
#include "plugin_loader.hpp"
#include "strata/errors.hpp"
#include "strata/logger.hpp"
#include "strata/model.hpp"
#include "strata/registry.hpp"
#include "strata/strategy.hpp"
#include "train/batches.hpp"
#include "train/tensor_memory.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using strata::test::require_gpu;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

/// A one-rank NCCL process group on cuda:0.
std::unique_ptr<strata::ProcessGroupComm> nccl_of_one() {
  strata::ProcessGroupOptions o;
  o.world.master_port = free_port();
  o.world.launcher = "strata";
  o.backend = "nccl";
  o.device = torch::Device("cuda:0");
  o.timeout = std::chrono::seconds(60);
  return strata::make_process_group_comm(o);
}

c10::Stream current_stream() {
  const torch::Device cuda("cuda:0");
  return c10::impl::VirtualGuardImpl(cuda.type()).getStream(cuda);
}

/// Queues about `seconds` of GPU time (a spin kernel) on the current stream.
void busy_gpu(double seconds) {
  // Calibrate once: the spin kernel's cycles per second on this GPU.
  static const double cycles_per_s = [] {
    const std::int64_t cycles = 100'000'000;
    at::cuda::sleep(cycles);
    torch::cuda::synchronize();
    const auto t0 = Clock::now();
    at::cuda::sleep(cycles);
    torch::cuda::synchronize();
    return static_cast<double>(cycles) / seconds_since(t0);
  }();
  at::cuda::sleep(static_cast<std::int64_t>(seconds * cycles_per_s));
}

}  // namespace

TEST_CASE("NCCL collectives refuse CPU tensors, wait() orders the stream and host_wait() blocks the host") {
  require_gpu();
  auto comm = nccl_of_one();
  CHECK(comm->device().is_cuda());
  auto cpu = torch::ones({4});
  CHECK_THROWS_AS(comm->all_reduce(cpu, strata::ReduceOp::kSum), strata::DistributedError);

  auto t = torch::ones({1 << 20}, torch::Device("cuda:0"));
  busy_gpu(0.5);  // the collective is queued behind half a second of GPU work
  auto t0 = Clock::now();
  auto work = comm->all_reduce(t, strata::ReduceOp::kSum, /*async=*/true);
  work->wait();  // orders the current stream only
  const double ordered_s = seconds_since(t0);
  CHECK_FALSE(current_stream().query());  // the GPU is still busy: the host did not wait for it
  t0 = Clock::now();
  work->host_wait();
  const double blocked_s = seconds_since(t0);
  MESSAGE("wait() returned after " << ordered_s << " s, host_wait() blocked " << blocked_s << " s");
  CHECK(ordered_s < 0.2);
  CHECK(blocked_s > 0.2);
  CHECK(t.sum().item<double>() == static_cast<double>(1 << 20));
}

TEST_CASE("a training step of every strategy is queued without waiting for the GPU") {
  require_gpu();
  strata::Registry registry;
  strata::PluginLoader loader(registry);
  loader.load_directory(STRATA_PLUGIN_BUILD_DIR);
  auto comm = nccl_of_one();
  const torch::Device cuda("cuda:0");
  strata::Logger log;
  for (const char* name : {"single", "ddp", "zero1", "zero2", "zero3", "fsdp"}) {
    CAPTURE(name);
    torch::manual_seed(0);
    auto model_options = registry.at(strata::PluginKind::kModel, "mlp").schema.defaults();
    model_options.set("hidden", std::vector<std::int64_t>{1024, 1024});
    auto model = registry.create_model("mlp", model_options, strata::ModelContext{strata::DataSpec{{256}, torch::kFloat32, 10}, {}});
    auto strategy =
        registry.create_strategy(name, registry.at(strata::PluginKind::kStrategy, name).schema.defaults());
    strata::StrategySetup setup;
    setup.model = model;
    setup.comm = comm.get();
    setup.device = cuda;
    setup.log = &log;
    strategy->setup(setup);
    strata::Batch batch{torch::randn({64, 256}, cuda), torch::randint(10, {64}, torch::TensorOptions(torch::kLong).device(cuda)), {}};
    auto step = [&] {
      auto loss = strategy->forward_backward(batch, {0, 1, torch::tensor(1.0f / 64, cuda)});
      auto norm = strategy->finish_gradients(1.0);
      strategy->step(1e-3);
      return std::make_pair(loss, norm);
    };
    step();  // warm-up: allocations and the optimizer's lazily created state
    torch::cuda::synchronize();
    busy_gpu(0.5);
    const auto t0 = Clock::now();
    auto [loss, norm] = step();
    const double host_s = seconds_since(t0);
    CHECK_FALSE(current_stream().query());  // still behind the spin kernel: nothing waited for it
    MESSAGE(name << ": the step returned after " << host_s << " s of host time");
    CHECK(host_s < 0.25);
    CHECK(std::isfinite(loss.item<double>()));
    CHECK(std::isfinite(norm.item<double>()));
  }
}

TEST_CASE("peak tensor bytes on CUDA are the caching allocator's allocated bytes") {
  require_gpu();
  const torch::Device cuda("cuda:0");
  CHECK(strata::tensor_memory::source(cuda) == "cuda_allocated");
  strata::tensor_memory::reset_peak(cuda);
  const auto base = strata::tensor_memory::live_bytes(cuda);
  {
    auto a = torch::empty({64 << 20}, torch::TensorOptions(torch::kFloat32).device(cuda));  // 256 MiB
    CHECK(strata::tensor_memory::live_bytes(cuda) >= base + (256 << 20));
  }
  CHECK(strata::tensor_memory::peak_bytes(cuda) >= base + (256 << 20));
  CHECK(strata::tensor_memory::live_bytes(cuda) == base);
}

TEST_CASE("checkpoint pieces on the GPU reach the writer byte for byte through the pinned staging buffers") {
  require_gpu();
  const torch::Device cuda(torch::kCUDA, 0);
  std::vector<strata::TensorPiece> pieces;
  const auto add = [&](const std::string& name, const torch::Tensor& data) {
    strata::TensorPiece p;
    p.name = name;
    p.shape = {data.numel()};
    p.end = data.numel();
    p.data = data;
    pieces.push_back(std::move(p));
  };
  add("floats", torch::randn({1000}, cuda));
  add("empty", torch::empty({0}, cuda));
  add("strided", torch::arange(600, torch::TensorOptions(torch::kInt64).device(cuda)).view({20, 30}).t());
  add("on_host", torch::randn({33}));  // read in place between staged pieces
  add("halves", torch::randn({777}, cuda).to(torch::kBFloat16));
  add("large", torch::randn({3 << 20}, cuda));  // 12 MiB: several buffers of 1 MiB, one of the default
  at::cuda::sleep(50'000'000);  // the copies queue behind work still running on the stream
  for (const std::int64_t stage : {std::int64_t{1000}, std::int64_t{1} << 20, strata::ckpt::kStageBytes}) {
    CAPTURE(stage);
    std::vector<std::vector<std::uint8_t>> bytes(pieces.size());
    strata::ckpt::for_each_piece_span(pieces, [&](std::size_t i, const void* data, std::size_t size) {
      const auto* p = static_cast<const std::uint8_t*>(data);
      bytes[i].insert(bytes[i].end(), p, p + size);
    }, stage);
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      CAPTURE(pieces[i].name);
      const auto host = pieces[i].data.to(torch::kCPU).contiguous();
      const auto* p = static_cast<const std::uint8_t*>(host.const_data_ptr());
      CHECK(bytes[i] == std::vector<std::uint8_t>(p, p + host.numel() * host.element_size()));
    }
  }
}

namespace {
/// Images that are a function of their index, [n, 3, side, side] float32.
class IndexedImages final : public strata::Dataset {
 public:
  explicit IndexedImages(std::int64_t side) : side_(side) {}
  std::int64_t size(strata::Split) const override { return 256; }
  strata::Batch get(strata::Split, const torch::Tensor& indices) const override {
    const auto n = indices.size(0);
    const auto x = indices.to(torch::kFloat32).view({n, 1, 1, 1}) + torch::zeros({n, 3, side_, side_});
    return {.inputs = x, .targets = indices.remainder(10), .mask = {}};
  }
  strata::DataSpec spec() const override { return {{3, side_, side_}, torch::kFloat32, 10}; }

 private:
  std::int64_t side_;
};

/// The batch of (step, 0) holds each image's index everywhere, as the trainer's stream reads it.
void check_indexed(const strata::Batch& batch, strata::BatchSampler& order, std::int64_t step) {
  const auto expected = order.indices(step, 0).to(torch::kFloat32);
  CHECK(torch::equal(batch.inputs.amax({1, 2, 3}).cpu(), expected));
  CHECK(torch::equal(batch.inputs.amin({1, 2, 3}).cpu(), expected));
}
}  // namespace

TEST_CASE("the batch loader copies the next batch on its own stream while the trainer's stream is busy") {
  require_gpu();
  const torch::Device cuda(torch::kCUDA, 0);
  IndexedImages data(64);  // 48 KiB an image, 3 MiB a batch
  strata::BatchSampler order({256, 64, 1, 1, 0, 3});
  strata::BatchLoader loader(data, order, {.device = cuda, .steps = 4, .micro_batches = 1});
  REQUIRE(loader.background());
  for (std::int64_t step = 0; step < 4; ++step) {
    CAPTURE(step);
    at::cuda::sleep(1'000'000'000);  // the trainer's stream, busy for about half a second
    const auto batch = loader.next(step, 0);
    CHECK(batch.inputs.device() == cuda);
    // Not queued behind the trainer's work, the copy (3 MiB) is done while that work still runs.
    const auto t0 = Clock::now();
    while (!loader.last_copy_done() && seconds_since(t0) < 0.2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHECK(loader.last_copy_done());
    CHECK_FALSE(c10::cuda::getCurrentCUDAStream().query());
    check_indexed(batch, order, step);
  }
}

TEST_CASE("the trainer's stream waits for the loader's copy of a batch before reading it") {
  require_gpu();
  const torch::Device cuda(torch::kCUDA, 0);
  IndexedImages data(512);  // 3 MiB an image, 192 MiB a batch: a copy of several milliseconds
  strata::BatchSampler order({256, 64, 1, 1, 0, 5});
  strata::BatchLoader loader(data, order, {.device = cuda, .steps = 4, .micro_batches = 1});
  for (std::int64_t step = 0; step < 4; ++step) {
    CAPTURE(step);
    // Read at once, while the copy may still run: without the stream waiting for it, the
    // reductions would see a partial batch (or the memory of an earlier one).
    const auto batch = loader.next(step, 0);
    check_indexed(batch, order, step);
  }
}
