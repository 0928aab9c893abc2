#pragma once
// The training batches of this rank, on its device and one micro-batch ahead (DESIGN §9). The
// next micro-batch is read from the dataset before the current one is handed out; on a GPU run
// it is read on the loader's one thread, into pinned host memory, and its copy to the device is
// issued without blocking: the host never waits for a copy, and the device never waits for the
// host's data loading.
//
// The loader's thread is created once per run and lives as long as the loader: a thread per batch
// (as std::async gives) makes every batch start a fresh OpenMP team sized to all cores for the
// dataset's ops above ATen's grain size, which on a 16-core GPU node cost 40 ms per step against
// a 2 ms step. Its intra-op parallelism is set on purpose (one thread, as PyTorch's pin-memory
// thread), so its ops never fight the trainer's threads for cores.

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include <torch/types.h>

#include "data/sampler.hpp"
#include "strata/dataset.hpp"

namespace strata {

struct BatchLoaderOptions {
  torch::Device device{torch::kCPU};  ///< where the trainer wants its batches
  std::int64_t steps = 0;             ///< the run's last step (exclusive): nothing is read beyond it
  std::int64_t micro_batches = 1;
  /// Read on the loader's own thread, one micro-batch ahead. Default: on a GPU run, where the host
  /// is free while the device computes; on the CPU the trainer reads in its own thread (a loader
  /// thread would take a core from compute).
  std::optional<bool> background{};
  /// Intra-op threads of the loader's thread (>= 1).
  int threads = 1;
};

class BatchLoader {
 public:
  /// `sampler` and `dataset` must outlive the loader. With a background thread, returns once the
  /// thread has set its own intra-op parallelism (the caller's is left as it was).
  BatchLoader(const Dataset& dataset, BatchSampler& sampler, BatchLoaderOptions options);
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  /// This rank's micro-batch `micro` of step `step` (0-based) on the device. Calls come in order;
  /// a dataset error is rethrown here.
  Batch next(std::int64_t step, std::int64_t micro);
  /// Whether batches are read on the loader's own thread.
  bool background() const noexcept { return worker_.joinable(); }

 private:
  struct Key {
    std::int64_t step = -1;
    std::int64_t micro = -1;
  };
  struct Request {
    torch::Tensor indices;
    std::int64_t epoch = 0;
  };
  /// Starts reading (step, micro): handed to the loader's thread, or read here.
  void start(Key key);
  /// The started batch, on the device (copied non_blocking from pinned memory).
  Batch finish();
  /// Waits for the started batch (or its error) and clears the slot.
  std::pair<std::optional<Batch>, std::exception_ptr> take();
  /// The loader thread's loop: one request at a time.
  void work(int threads);
  Batch read(const Request& request) const;

  const Dataset& dataset_;
  BatchSampler& sampler_;
  BatchLoaderOptions options_;
  Key pending_key_;
  bool pending_ = false;

  // The loader's thread and what it shares with the trainer's, under mutex_.
  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool ready_ = false;  // the thread has set its intra-op threads
  bool stop_ = false;
  std::optional<Request> request_;
  std::optional<Batch> result_;
  std::exception_ptr error_;
};

}  // namespace strata
