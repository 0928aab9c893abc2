#include "train/batches.hpp"

#include "train/tensor_memory.hpp"

namespace strata {

namespace {

/// The dataset's batch, off the tensor-memory count (host data); pinned for a device copy.
Batch read_batch(const Dataset& dataset, const torch::Tensor& indices, std::int64_t epoch, bool pin) {
  tensor_memory::Untracked host_data;
  const auto* augmenting = dynamic_cast<const Augmenting*>(&dataset);
  Batch b = augmenting != nullptr ? augmenting->get_train(indices, epoch) : dataset.get(Split::kTrain, indices);
  if (pin) {
    for (auto* t : {&b.inputs, &b.targets, &b.mask})
      if (t->defined()) *t = t->pin_memory();
  }
  return b;
}

}  // namespace

BatchLoader::BatchLoader(const Dataset& dataset, BatchSampler& sampler, torch::Device device, std::int64_t steps,
                         std::int64_t micro_batches)
    : dataset_(dataset), sampler_(sampler), device_(device), steps_(steps), micro_batches_(micro_batches) {}

BatchLoader::~BatchLoader() {
  if (pending_.valid()) pending_.wait();  // the helper thread reads through references we own
}

void BatchLoader::start(Key key) {
  pending_key_ = key;
  auto indices = sampler_.indices(key.step, key.micro);  // the sampler is not thread-safe: here
  const std::int64_t epoch = key.step / sampler_.steps_per_epoch();
  if (device_.is_cuda()) {
    pending_ = std::async(std::launch::async,
                          [this, indices, epoch] { return read_batch(dataset_, indices, epoch, /*pin=*/true); });
  } else {
    // On the CPU the batch is the device batch, and a helper thread would take a core from compute.
    std::promise<Batch> ready;
    ready.set_value(read_batch(dataset_, indices, epoch, /*pin=*/false));
    pending_ = ready.get_future();
  }
}

Batch BatchLoader::finish() {
  Batch b = pending_.get();  // rethrows a dataset error
  return device_.is_cuda() ? b.to(device_, /*non_blocking=*/true) : b;
}

Batch BatchLoader::next(std::int64_t step, std::int64_t micro) {
  if (!pending_.valid() || pending_key_.step != step || pending_key_.micro != micro) {
    if (pending_.valid()) pending_.wait();
    start({step, micro});
  }
  Batch current = finish();
  Key following{step, micro + 1};
  if (following.micro == micro_batches_) following = {step + 1, 0};
  if (following.step < steps_) start(following);
  return current;
}

}  // namespace strata
