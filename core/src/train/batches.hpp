#pragma once
// The training batches of this rank, on its device and one micro-batch ahead (DESIGN §9). The
// next micro-batch is read from the dataset (on a GPU run on a helper thread, into pinned host
// memory) and its copy to the device is issued without blocking, before the current one is handed
// out: the host never waits for a copy, and the device never waits for the host's data loading.

#include <cstdint>
#include <future>
#include <optional>

#include <torch/types.h>

#include "data/sampler.hpp"
#include "strata/dataset.hpp"

namespace strata {

class BatchLoader {
 public:
  /// `sampler` and `dataset` must outlive the loader.
  BatchLoader(const Dataset& dataset, BatchSampler& sampler, torch::Device device, std::int64_t steps,
              std::int64_t micro_batches);
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  /// This rank's micro-batch `micro` of step `step` (0-based) on the device. Calls come in order.
  Batch next(std::int64_t step, std::int64_t micro);

 private:
  struct Key {
    std::int64_t step = -1;
    std::int64_t micro = -1;
  };
  /// Starts reading (step, micro): on a GPU run asynchronously, into pinned memory.
  void start(Key key);
  /// The started batch, copied to the device (non_blocking from pinned memory).
  Batch finish();

  const Dataset& dataset_;
  BatchSampler& sampler_;
  torch::Device device_;
  std::int64_t steps_;
  std::int64_t micro_batches_;
  Key pending_key_;
  std::future<Batch> pending_;  // host batch being read
};

}  // namespace strata
