#include "train/batches.hpp"

#include <utility>

#include <ATen/Parallel.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "train/tensor_memory.hpp"

namespace strata {

BatchLoader::BatchLoader(const Dataset& dataset, BatchSampler& sampler, BatchLoaderOptions options)
    : dataset_(dataset), sampler_(sampler), options_(std::move(options)) {
  if (!options_.background.value_or(options_.device.is_cuda())) return;
  // at::set_num_threads sets the calling thread's OpenMP team size and also the default that
  // threads created later start with: the loader's thread sets its own, then the trainer's
  // default is put back, so only the loader's thread runs with options_.threads.
  const int trainer_threads = at::get_num_threads();
  worker_ = std::thread([this, threads = std::max(1, options_.threads)] { work(threads); });
  {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [this] { return ready_; });
  }
  at::set_num_threads(trainer_threads);
  if (error_) {  // the thread could not take the device: it has ended; its error is the trainer's
    worker_.join();
    std::rethrow_exception(std::exchange(error_, nullptr));
  }
}

BatchLoader::~BatchLoader() {
  if (!worker_.joinable()) return;
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  worker_.join();  // a read in progress completes first: it reads through references we own
}

void BatchLoader::work(int threads) {
  // ATen initializes a thread's parallelism lazily, at its first parallel op, from the default:
  // have LibTorch initialize it first (get_num_threads does, with LibTorch's own per-thread flag;
  // an inline call here would set this library's copy), or that first op would undo the setting.
  (void)at::get_num_threads();
  at::set_num_threads(threads);
  // Pinned memory is allocated in the current device's context: this rank's GPU, never GPU 0.
  std::exception_ptr startup;
  try {
    if (options_.device.is_cuda()) {
      const auto* device = c10::impl::getDeviceGuardImpl(options_.device.type());
      device->setDevice(options_.device);
      copy_stream_ = device->getStreamFromGlobalPool(options_.device, /*isHighPriority=*/false);
    }
  } catch (...) {
    startup = std::current_exception();
  }
  {
    std::lock_guard lock(mutex_);
    ready_ = true;
    error_ = startup;
  }
  changed_.notify_all();
  if (startup) return;
  for (;;) {
    Request request;
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [this] { return stop_ || request_.has_value(); });
      if (stop_) return;
      request = std::move(*request_);
      request_.reset();
    }
    std::optional<Loaded> batch;
    std::exception_ptr error;
    try {
      batch = Loaded{read(request), std::nullopt};
      if (copy_stream_) {  // copied on this thread's stream; finish() has the trainer's stream wait for it
        const c10::StreamGuard on_copy_stream(*copy_stream_);
        batch->batch = batch->batch.to(options_.device, /*non_blocking=*/true);
        batch->copied.emplace(options_.device.type());
        batch->copied->record(*copy_stream_);
      }
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard lock(mutex_);
      result_ = std::move(batch);
      error_ = error;
    }
    changed_.notify_all();
  }
}

/// The dataset's batch, off the tensor-memory count (host data); pinned for a device copy.
Batch BatchLoader::read(const Request& request) const {
  tensor_memory::Untracked host_data;
  const auto* augmenting = dynamic_cast<const Augmenting*>(&dataset_);
  Batch b = augmenting != nullptr ? augmenting->get_train(request.indices, request.epoch)
                                  : dataset_.get(Split::kTrain, request.indices);
  if (options_.device.is_cuda()) {
    for (auto* t : {&b.inputs, &b.targets, &b.mask})
      if (t->defined()) *t = t->pin_memory();
  }
  return b;
}

void BatchLoader::start(Key key) {
  pending_key_ = key;
  pending_ = true;
  // The sampler is not thread-safe: it is only ever asked here, on the trainer's thread.
  Request request{sampler_.indices(key.step, key.micro), key.step / sampler_.steps_per_epoch()};
  if (!background()) {
    try {
      result_ = Loaded{read(request), std::nullopt};
    } catch (...) {
      error_ = std::current_exception();
    }
    return;
  }
  {
    std::lock_guard lock(mutex_);
    request_ = std::move(request);
  }
  changed_.notify_all();
}

Batch BatchLoader::finish() {
  auto [loaded, error] = take();
  if (error) std::rethrow_exception(error);  // a dataset error, on the trainer's thread
  last_copy_.reset();
  if (loaded->copied) {
    // The trainer's stream waits for the copy (on the device, not the host), and the caching
    // allocator learns that the batch's memory, allocated on the loader's stream, is used on it.
    const c10::Stream compute = c10::impl::getDeviceGuardImpl(options_.device.type())->getStream(options_.device);
    loaded->copied->block(compute);
    for (const auto* t : {&loaded->batch.inputs, &loaded->batch.targets, &loaded->batch.mask})
      if (t->defined()) t->record_stream(compute);
    last_copy_ = std::move(loaded->copied);
    return std::move(loaded->batch);
  }
  return options_.device.is_cuda() ? loaded->batch.to(options_.device, /*non_blocking=*/true) : std::move(loaded->batch);
}

std::pair<std::optional<BatchLoader::Loaded>, std::exception_ptr> BatchLoader::take() {
  std::optional<Loaded> batch;
  std::exception_ptr error;
  {
    std::unique_lock lock(mutex_, std::defer_lock);
    if (background()) {
      lock.lock();
      changed_.wait(lock, [this] { return result_.has_value() || error_ != nullptr; });
    }
    batch = std::move(result_);
    error = error_;
    result_.reset();
    error_ = nullptr;
  }
  pending_ = false;
  return {std::move(batch), error};
}

Batch BatchLoader::next(std::int64_t step, std::int64_t micro) {
  if (!pending_ || pending_key_.step != step || pending_key_.micro != micro) {
    if (pending_) take();  // a batch nobody asked for: wait for it, drop it
    start({step, micro});
  }
  Batch current = finish();
  Key following{step, micro + 1};
  if (following.micro == options_.micro_batches) following = {step + 1, 0};
  if (following.step < options_.steps) start(following);
  return current;
}

}  // namespace strata
