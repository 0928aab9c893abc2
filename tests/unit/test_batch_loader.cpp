#include "test_support.hpp"
// The batch loader: one persistent thread per run with its own intra-op parallelism, no thread
// per step, the same batches as reading inline, dataset errors on the trainer's thread.

#include <ATen/Parallel.h>

#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "data/sampler.hpp"
#include "train/batches.hpp"

namespace {

/// Threads of this process now (/proc/self/task).
std::size_t process_threads() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

/// Images computed from their indices by an ATen op above the grain size (32768 elements per
/// batch of 64), so a read runs parallel wherever the reading thread allows it. Records on which
/// thread, with how many intra-op threads and next to how many process threads each read ran.
class Recording final : public strata::Dataset {
 public:
  std::int64_t size(strata::Split) const override { return 1024; }
  strata::Batch get(strata::Split, const torch::Tensor& indices) const override {
    {
      std::lock_guard lock(mutex_);
      readers.insert(std::this_thread::get_id());
      intra_op.insert(at::get_num_threads());
      thread_counts.push_back(process_threads());
    }
    if (fail_at >= 0 && indices[0].item<std::int64_t>() == fail_at) throw std::runtime_error("damaged record");
    const auto n = indices.size(0);
    auto x = (indices.to(torch::kFloat32).view({n, 1}) + torch::arange(784, torch::kFloat32).view({1, 784})).sin();
    return {.inputs = x.view({n, 1, 28, 28}), .targets = indices.remainder(10), .mask = {}};
  }
  strata::DataSpec spec() const override { return {{1, 28, 28}, torch::kFloat32, 10}; }

  mutable std::mutex mutex_;
  mutable std::set<std::thread::id> readers;
  mutable std::set<int> intra_op;
  mutable std::vector<std::size_t> thread_counts;
  std::int64_t fail_at = -1;
};

constexpr std::int64_t kSteps = 60, kMicro = 2;

strata::BatchSampler sampler() { return strata::BatchSampler({1024, 128, kMicro, 1, 0, 7}); }

}  // namespace

TEST_CASE("the background loader reads every batch on one thread of its own, with one intra-op thread") {
  Recording data;
  auto order = sampler();
  const int trainer_threads = at::get_num_threads();
  strata::BatchLoader loader(data, order, {torch::kCPU, kSteps, kMicro, /*background=*/true});
  REQUIRE(loader.background());
  CHECK(at::get_num_threads() == trainer_threads);  // the caller's parallelism is left as it was
  std::size_t after_warmup = 0;
  for (std::int64_t step = 0; step < kSteps; ++step) {
    for (std::int64_t m = 0; m < kMicro; ++m) CHECK(loader.next(step, m).size() == 64);
    if (step == 4) after_warmup = process_threads();
  }
  CHECK(process_threads() == after_warmup);  // no thread per step, no OpenMP team per thread
  CHECK(data.readers.size() == 1);           // one loader thread for the whole run...
  CHECK(data.readers.count(std::this_thread::get_id()) == 0);  // ...and not the trainer's
  CHECK(data.intra_op == std::set<int>{1});  // set on purpose, not inherited from the machine
  CHECK(at::get_num_threads() == trainer_threads);
  // The process never held more threads while reading than it did once the loader was warm.
  for (std::size_t i = 2 * kMicro * 5; i < data.thread_counts.size(); ++i) CHECK(data.thread_counts[i] <= after_warmup);
}

TEST_CASE("the background loader hands out the batches an inline read gives, in order") {
  Recording a, b;
  auto order_a = sampler(), order_b = sampler();
  strata::BatchLoader background(a, order_a, {torch::kCPU, 10, kMicro, true});
  strata::BatchLoader inline_reads(b, order_b, {torch::kCPU, 10, kMicro, false});
  CHECK_FALSE(inline_reads.background());
  for (std::int64_t step = 0; step < 10; ++step)
    for (std::int64_t m = 0; m < kMicro; ++m) {
      const auto x = background.next(step, m), y = inline_reads.next(step, m);
      CHECK(torch::equal(x.inputs, y.inputs));
      CHECK(torch::equal(x.targets, y.targets));
    }
  CHECK(b.readers == std::set<std::thread::id>{std::this_thread::get_id()});
}

TEST_CASE("a dataset error on the loader thread is raised by next() on the trainer's thread") {
  Recording data;
  auto order = sampler();
  data.fail_at = order.indices(3, 1)[0].item<std::int64_t>();
  strata::BatchLoader loader(data, order, {torch::kCPU, kSteps, kMicro, true});
  for (std::int64_t step = 0; step < 3; ++step)
    for (std::int64_t m = 0; m < kMicro; ++m) loader.next(step, m);
  CHECK_NOTHROW(loader.next(3, 0));
  CHECK_THROWS_WITH_AS(loader.next(3, 1), "damaged record", std::runtime_error);
}

TEST_CASE("by default a CPU run reads its batches inline, in the trainer's thread") {
  Recording data;
  auto order = sampler();
  strata::BatchLoader cpu(data, order, {torch::kCPU, 1, 1});
  CHECK_FALSE(cpu.background());
}
