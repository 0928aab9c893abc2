#pragma once
// The training batches of this rank, on its device and one micro-batch ahead. The
// next micro-batch is read from the dataset before the current one is handed out; on a GPU run
// it is read on the loader's one thread, into pinned host memory, and copied to the device there,
// on the loader's own stream: the copy runs while the trainer's stream computes the batch before
// (not queued behind it), and the trainer's stream waits only for that copy's event. The host
// never waits for a copy, and the device never waits for the host's data loading. The price: the
// batches live in that stream's pool of the caching allocator, each reused once the trainer's
// stream is past its step, so the device holds the next batch beside the current one, plus one
// for every step the host runs ahead of the device.
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

#include <c10/core/Event.h>
#include <c10/core/Stream.h>
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
  /// Whether the device copy of the batch `next` returned last has completed; true where there is
  /// no copy of the loader's own (the CPU, or no background thread). For tests: a copy on the
  /// loader's stream completes while the trainer's stream is still busy.
  bool last_copy_done() const { return !last_copy_ || last_copy_->query(); }

 private:
  struct Key {
    std::int64_t step = -1;
    std::int64_t micro = -1;
  };
  struct Request {
    torch::Tensor indices;
    std::int64_t epoch = 0;
  };
  /// A batch read, and (when the loader's thread copied it to the device) the copy's event.
  struct Loaded {
    Batch batch;
    std::optional<c10::Event> copied;
  };
  /// Starts reading (step, micro): handed to the loader's thread, or read here.
  void start(Key key);
  /// The started batch, on the device: copied by the loader's thread (the trainer's stream made to
  /// wait for it), or here, non_blocking from pinned memory.
  Batch finish();
  /// Waits for the started batch (or its error) and clears the slot.
  std::pair<std::optional<Loaded>, std::exception_ptr> take();
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
  std::optional<Loaded> result_;
  std::exception_ptr error_;
  std::optional<c10::Stream> copy_stream_;  // the loader thread's stream for device copies (GPU runs)
  std::optional<c10::Event> last_copy_;     // of the batch next() returned last
};

}  // namespace strata
