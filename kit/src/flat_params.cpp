#include "strata/flat_params.hpp"

#include <unordered_set>

#include <c10/core/DeviceGuard.h>
#include <c10/core/StorageImpl.h>
#include <torch/utils.h>

#include "strata/errors.hpp"

namespace strata::inline kit_v3 {

void free_storage(const torch::Tensor& tensor) {
  auto* storage = tensor.storage().unsafeGetStorageImpl();
  if (storage->nbytes() == 0) return;
  storage->set_data_ptr_noswap(storage->allocator()->allocate(0));
  storage->set_nbytes(0);
}

void reallocate_storage(const torch::Tensor& tensor, std::size_t bytes) {
  auto* storage = tensor.storage().unsafeGetStorageImpl();
  if (storage->nbytes() == bytes) return;
  const c10::OptionalDeviceGuard on_its_device(tensor.device());  // a raw allocation takes the current device
  storage->set_data_ptr_noswap(storage->allocator()->allocate(bytes));
  storage->set_nbytes(bytes);
}

std::int64_t storage_bytes(const std::vector<torch::Tensor>& tensors) {
  std::unordered_set<const void*> seen;
  std::int64_t total = 0;
  for (const auto& t : tensors) {
    if (!t.defined()) continue;
    const auto* storage = t.storage().unsafeGetStorageImpl();
    if (seen.insert(storage).second) total += static_cast<std::int64_t>(storage->nbytes());
  }
  return total;
}

FlatGroup::FlatGroup(std::vector<torch::Tensor> params, std::vector<std::string> names, FlatGroupOptions options)
    : params_(std::move(params)), names_(std::move(names)), options_(std::move(options)) {
  const int n = options_.shard_size;
  const int rank = options_.shard_rank;
  if (params_.empty() || params_.size() != names_.size() || n < 1 || rank < 0 || rank >= n)
    throw Error("FlatGroup: " + std::to_string(params_.size()) + " parameters with " + std::to_string(names_.size()) +
                " names, shard rank " + std::to_string(rank) + " of " + std::to_string(n));
  const auto device = params_.front().device();
  for (std::size_t k = 0; k < params_.size(); ++k) {
    const auto& p = params_[k];
    if (p.scalar_type() != torch::kFloat32 || p.device() != device || !p.requires_grad())
      throw Error("parameter " + names_[k] + " is " + c10::toString(p.scalar_type()) + " on " + p.device().str() +
                  (p.requires_grad() ? "" : " and frozen") +
                  "; flat groups take trainable float32 parameters on one device (set [precision] param_dtype for "
                  "low-precision compute)");
    offsets_.push_back(numel_);
    numel_ += p.numel();
  }
  padded_ = (numel_ + n - 1) / n * n;
  chunk_ = padded_ / n;

  torch::NoGradGuard no_grad;
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  auto flat = torch::empty({padded_}, f32);
  for (std::size_t k = 0; k < params_.size(); ++k)
    flat.narrow(0, offsets_[k], params_[k].numel()).copy_(params_[k].detach().reshape({-1}));
  flat.narrow(0, numel_, padded_ - numel_).zero_();

  const bool mixed = options_.precision.mixed();
  const bool gathered = options_.residency == Residency::kGathered;
  aliased_ = !mixed && ((n == 1 && !(gathered && options_.gather_unsharded)) || !gathered);
  if (aliased_) {
    full_ = flat;
    master_ = (n == 1 ? flat : chunk_of(flat, rank)).detach();
  } else {
    master_ = chunk_of(flat, rank).clone();
    full_ = mixed ? flat.to(options_.precision.param_dtype()) : flat;
  }
  const auto param_views = views(full_);
  for (std::size_t k = 0; k < params_.size(); ++k) params_[k].set_data(param_views[k]);
  master_.set_requires_grad(true);

  if (options_.grads == GradHolding::kFull) {
    full_grad_ = torch::zeros({padded_}, f32);
    grad_views_ = views(full_grad_);
    // float32 compute: autograd accumulates straight into the buffer (the grads are its views).
    if (!mixed)
      for (std::size_t k = 0; k < params_.size(); ++k) params_[k].mutable_grad() = grad_views_[k];
    master_.mutable_grad() = n == 1 ? full_grad_ : chunk_of(full_grad_, rank);
  } else {
    master_.mutable_grad() = torch::zeros({chunk_}, f32);
  }
  if (options_.residency == Residency::kGathered) release_full();
}

std::vector<torch::Tensor> FlatGroup::views(const torch::Tensor& flat) const {
  std::vector<torch::Tensor> out;
  out.reserve(params_.size());
  for (std::size_t k = 0; k < params_.size(); ++k)
    out.push_back(flat.narrow(0, offsets_[k], params_[k].numel()).view(params_[k].sizes()));
  return out;
}

bool FlatGroup::materialized() const { return full_.storage().nbytes() > 0 || padded_ == 0; }

void FlatGroup::allocate_full() {
  if (!aliased_) reallocate_storage(full_, static_cast<std::size_t>(padded_) * full_.element_size());
}

void FlatGroup::release_full() {
  if (!aliased_) free_storage(full_);
}

torch::Tensor FlatGroup::gather_input() const {
  // Persistent: the owned chunk of full() itself (the all-gather runs in place, no staging copy).
  if (options_.residency == Residency::kPersistent) return chunk_of(full_, options_.shard_rank);
  return master_.detach().to(options_.precision.param_dtype());
}

void FlatGroup::master_to_full() {
  if (aliased_ || options_.residency == Residency::kGathered) return;
  torch::NoGradGuard no_grad;
  chunk_of(full_, options_.shard_rank).copy_(master_);
}

void FlatGroup::accumulate(std::size_t k) {
  if (options_.grads != GradHolding::kFull || !options_.precision.mixed()) return;
  auto& grad = params_[k].mutable_grad();
  if (!grad.defined()) return;
  torch::NoGradGuard no_grad;
  grad_views_[k].add_(grad);
  grad = torch::Tensor();
}

torch::Tensor FlatGroup::take_grads(torch::ScalarType dtype) {
  torch::NoGradGuard no_grad;
  auto staged = torch::empty({padded_}, master_.options().dtype(dtype).requires_grad(false));
  // One concatenation (one kernel on a GPU, casting to `dtype` as it copies) rather than a copy
  // per parameter; a parameter without a gradient contributes zeros.
  std::vector<torch::Tensor> pieces;
  pieces.reserve(params_.size());
  for (auto& p : params_) {
    auto& grad = p.mutable_grad();
    pieces.push_back(grad.defined() ? grad.reshape({-1}) : torch::zeros({p.numel()}, staged.options()));
    grad = torch::Tensor();
  }
  auto filled = staged.narrow(0, 0, numel_);
  torch::cat_out(filled, pieces);
  staged.narrow(0, numel_, padded_ - numel_).zero_();
  return staged;
}

void FlatGroup::zero_grad() {
  torch::NoGradGuard no_grad;
  if (full_grad_.defined()) full_grad_.zero_();
  else master_.grad().zero_();
}

std::vector<torch::Tensor> group_masters(const FlatGroups& groups) {
  std::vector<torch::Tensor> out;
  for (const auto& g : groups) out.push_back(g->master());
  return out;
}

std::vector<torch::Tensor> group_master_grads(const FlatGroups& groups) {
  std::vector<torch::Tensor> out;
  for (const auto& g : groups) out.push_back(g->master().grad());
  return out;
}

std::pair<std::int64_t, std::int64_t> group_bytes(const FlatGroups& groups) {
  std::vector<torch::Tensor> params, grads;
  for (const auto& g : groups) {
    for (auto& t : g->param_tensors()) params.push_back(t);
    for (auto& t : g->grad_tensors()) grads.push_back(t);
  }
  return {storage_bytes(params), storage_bytes(grads)};
}

torch::Tensor full_master(const FlatGroup& group, Comm* shard) {
  torch::NoGradGuard no_grad;
  if (group.shard_size() == 1) return group.master().detach();
  auto full = torch::empty({group.padded()}, group.master().options().requires_grad(false));
  shard->all_gather(full, group.master().detach());
  return full;
}

}  // namespace strata::inline kit_v3
