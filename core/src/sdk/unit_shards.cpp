#include "strata/unit_shards.hpp"

#include <algorithm>
#include <unordered_set>

#include <c10/core/StorageImpl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/utils.h>

#include "strata/errors.hpp"
#include "strata/optim.hpp"

namespace strata {

void free_storage(const torch::Tensor& tensor) {
  auto* storage = tensor.storage().unsafeGetStorageImpl();
  if (storage->nbytes() == 0) return;
  storage->set_data_ptr_noswap(storage->allocator()->allocate(0));
  storage->set_nbytes(0);
}

void reallocate_storage(const torch::Tensor& tensor, std::size_t bytes) {
  auto* storage = tensor.storage().unsafeGetStorageImpl();
  if (storage->nbytes() == bytes) return;
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

/// One flat parameter group of a unit.
struct UnitShards::Group {
  enum class State { kFreed, kGathering, kGathered };
  std::size_t unit = 0;
  std::vector<torch::Tensor> params;  // the model's leaves, views into `full`
  std::vector<std::string> names;
  std::vector<std::int64_t> offsets;
  std::int64_t numel = 0;
  std::int64_t padded = 0;  // numel rounded up to a multiple of the shard group size
  std::int64_t chunk = 0;   // padded / N
  torch::Tensor full;       // [padded] in the parameter dtype; storage allocated only while gathered
  bool alias = false;       // full is the master shard itself (N = 1, float32): never gathered or freed
  State state = State::kFreed;
  std::shared_ptr<CommWork> gather_work;
  torch::Tensor gather_source;  // the master shard in the parameter dtype, while a gather runs
  torch::Tensor grad_shard;     // [chunk] float32, accumulated over micro-batches
  torch::Tensor staged;         // [padded] gradients in the reduce dtype, waiting to be reduced
  std::size_t grads_seen = 0;   // parameters whose gradient arrived in this backward
  bool reduced = false;         // gradients handed to a reduction in this backward

  std::size_t full_bytes() const { return static_cast<std::size_t>(padded) * full.element_size(); }
};

struct UnitShards::Unit {
  std::vector<std::size_t> groups;
  std::size_t staged = 0;  // groups whose gradients are staged in this backward
};

/// One reduce-scatter over consecutive groups: input rank-major [N, sum of chunks].
struct UnitShards::Reduction {
  std::vector<std::size_t> groups;
  torch::Tensor input;
  torch::Tensor output;  // [sum of chunks]
  std::shared_ptr<CommWork> work;
};

UnitShards::UnitShards(std::shared_ptr<Model> model, torch::Device device, Comm& shard, Comm* replicate,
                       UnitShardOptions options)
    : model_(std::move(model)), device_(device), shard_(shard), replicate_(replicate), options_(options) {
  torch::NoGradGuard no_grad;
  const int n = shard_.world_size();
  const int rank = shard_.rank();
  const auto master_options = torch::TensorOptions().dtype(torch::kFloat32).device(device_);
  const auto& units = model_->units();
  units_.resize(units.size());
  for (std::size_t u = 0; u < units.size(); ++u) {
    std::vector<std::pair<std::string, torch::Tensor>> params;
    for (const auto& p : units[u]->named_parameters())
      if (p.value().requires_grad()) params.emplace_back(model_->unit_names()[u] + "." + p.key(), p.value());
    // Cut the unit into groups of about group_cap_bytes (one group when the cap is 0).
    std::int64_t filled = 0;
    for (auto& [name, p] : params) {
      if (p.scalar_type() != torch::kFloat32)
        throw Error(fmt::format("parameter {} is {}; sharded strategies take float32 models (set [precision] "
                                "param_dtype for low-precision compute)",
                                name, c10::toString(p.scalar_type())));
      const auto bytes = static_cast<std::int64_t>(p.nbytes());
      if (units_[u].groups.empty() ||
          (options_.group_cap_bytes > 0 && filled > 0 && filled + bytes > options_.group_cap_bytes)) {
        units_[u].groups.push_back(groups_.size());
        groups_.push_back(std::make_unique<Group>());
        groups_.back()->unit = u;
        filled = 0;
      }
      auto& g = *groups_.back();
      g.params.push_back(p);
      g.names.push_back(name);
      g.offsets.push_back(g.numel);
      g.numel += p.numel();
      filled += bytes;
    }
  }
  for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
    auto& g = *groups_[gi];
    g.padded = (g.numel + n - 1) / n * n;
    g.chunk = g.padded / n;
    auto flat = torch::zeros({g.padded}, master_options);
    for (std::size_t k = 0; k < g.params.size(); ++k)
      flat.narrow(0, g.offsets[k], g.params[k].numel()).copy_(g.params[k].detach().reshape({-1}));
    auto master = flat.narrow(0, rank * g.chunk, g.chunk).clone();
    g.alias = n == 1 && !options_.precision.mixed();
    g.full = g.alias ? master : flat.to(options_.precision.param);
    for (std::size_t k = 0; k < g.params.size(); ++k) {
      auto p = g.params[k];
      p.set_data(g.full.narrow(0, g.offsets[k], p.numel()).view(p.sizes()));
    }
    g.state = Group::State::kGathered;
    if (!g.alias) {
      free_storage(g.full);
      g.state = Group::State::kFreed;
    }
    master.set_requires_grad(true);
    g.grad_shard = torch::zeros({g.chunk}, master_options);
    master.mutable_grad() = g.grad_shard;
    masters_.push_back(master);
    for (const auto& p : g.params) hooks_.push_back(add_grad_ready_hook(p, [this, gi] { grad_ready(gi); }));
  }
}

UnitShards::~UnitShards() {
  // Pending collectives hold tensors of this object: complete them (errors were reported before).
  for (auto& r : pending_)
    try {
      if (r->work) r->work->wait();
    } catch (...) {
    }
  for (auto& g : groups_)
    try {
      if (g->gather_work) g->gather_work->wait();
    } catch (...) {
    }
}

void UnitShards::gather(std::size_t unit) {
  torch::NoGradGuard no_grad;
  for (auto gi : units_[unit].groups) {
    auto& g = *groups_[gi];
    if (g.state != Group::State::kFreed) continue;
    reallocate_storage(g.full, g.full_bytes());
    auto source = masters_[gi].detach().to(options_.precision.param);
    if (shard_.world_size() == 1) {
      g.full.copy_(source);
      g.state = Group::State::kGathered;
      continue;
    }
    g.gather_source = source;
    g.gather_work = shard_.all_gather(g.full, g.gather_source, /*async=*/true);
    g.state = Group::State::kGathering;
  }
}

void UnitShards::wait_gathered(std::size_t unit) {
  for (auto gi : units_[unit].groups) {
    auto& g = *groups_[gi];
    if (g.state != Group::State::kGathering) continue;
    g.gather_work->wait();
    g.gather_work.reset();
    g.gather_source = torch::Tensor();
    g.state = Group::State::kGathered;
  }
}

void UnitShards::release(std::size_t unit) {
  wait_gathered(unit);
  for (auto gi : units_[unit].groups) {
    auto& g = *groups_[gi];
    if (g.alias) continue;
    free_storage(g.full);
    g.state = Group::State::kFreed;
  }
}

torch::Tensor UnitShards::forward(const torch::Tensor& input, bool train) {
  const auto& units = model_->units();
  auto x = input.to(device_);
  if (x.is_floating_point()) x = x.to(options_.precision.param);
  const bool backward = train && torch::GradMode::is_enabled();
  for (std::size_t u = 0; u < units.size(); ++u) {
    if (units_[u].groups.empty()) {
      x = units[u]->forward(x);
      continue;
    }
    gather(u);
    // Prefetch: the next units' all-gathers run while this unit computes.
    for (std::size_t k = u + 1, issued = 0; k < units.size() && issued < static_cast<std::size_t>(options_.forward_prefetch);
         ++k)
      if (!units_[k].groups.empty()) {
        gather(k);
        ++issued;
      }
    wait_gathered(u);
    x = units[u]->forward(x);
    if (backward && x.requires_grad()) x.register_hook([this, u](const torch::Tensor&) { pre_backward(u); });
    if (!backward || options_.reshard_after_forward) release(u);
  }
  return x;
}

void UnitShards::pre_backward(std::size_t unit) {
  gather(unit);
  for (std::size_t k = unit, issued = 0; k-- > 0 && issued < static_cast<std::size_t>(options_.backward_prefetch);)
    if (!units_[k].groups.empty()) {
      gather(k);
      ++issued;
    }
  wait_gathered(unit);
}

void UnitShards::grad_ready(std::size_t gi) {
  auto& g = *groups_[gi];
  if (++g.grads_seen < g.params.size()) return;
  torch::NoGradGuard no_grad;
  // Stage the gradients in the reduce dtype, zero-padded, and drop autograd's copies.
  g.staged = torch::zeros({g.padded}, torch::TensorOptions().dtype(options_.precision.reduce).device(device_));
  for (std::size_t k = 0; k < g.params.size(); ++k) {
    auto& p = g.params[k];
    g.staged.narrow(0, g.offsets[k], p.numel()).copy_(p.grad().reshape({-1}));
    p.mutable_grad() = torch::Tensor();
  }
  g.grads_seen = 0;
  g.reduced = true;
  ready_.push_back(gi);
  auto& unit = units_[g.unit];
  if (++unit.staged == unit.groups.size()) {
    unit.staged = 0;
    release(g.unit);  // every gradient of the unit exists: its backward is over
  }
  if (options_.overlap) flush_reductions(false);
}

void UnitShards::flush_reductions(bool all) {
  while (!ready_.empty()) {
    // Take ready groups in order up to the reduce cap (at least one).
    std::size_t take = 0;
    std::int64_t bytes = 0;
    while (take < ready_.size()) {
      const auto& g = *groups_[ready_[take]];
      const auto b = static_cast<std::int64_t>(g.staged.nbytes());
      if (take > 0 && bytes + b > options_.reduce_cap_bytes) break;
      bytes += b;
      ++take;
    }
    if (take == ready_.size() && !all && bytes < options_.reduce_cap_bytes) return;  // bucket not full yet
    auto r = std::make_unique<Reduction>();
    r->groups.assign(ready_.begin(), ready_.begin() + static_cast<std::ptrdiff_t>(take));
    ready_.erase(ready_.begin(), ready_.begin() + static_cast<std::ptrdiff_t>(take));
    const int n = shard_.world_size();
    std::vector<torch::Tensor> columns;
    std::int64_t width = 0;
    for (auto gi : r->groups) {
      auto& g = *groups_[gi];
      columns.push_back(g.staged.view({n, g.chunk}));
      width += g.chunk;
    }
    r->input = columns.size() == 1 ? columns.front().reshape({-1}) : torch::cat(columns, 1).reshape({-1});
    for (auto gi : r->groups) groups_[gi]->staged = torch::Tensor();
    if (n == 1) {
      r->output = r->input;
    } else {
      r->output = torch::empty({width}, r->input.options());
      r->work = shard_.reduce_scatter(r->output, r->input, ReduceOp::kAvg, /*async=*/options_.overlap);
    }
    pending_.push_back(std::move(r));
  }
}

void UnitShards::complete(Reduction& r) {
  if (r.work) r.work->wait();
  torch::NoGradGuard no_grad;
  std::int64_t offset = 0;
  for (auto gi : r.groups) {
    auto& g = *groups_[gi];
    g.grad_shard.add_(r.output.narrow(0, offset, g.chunk));
    offset += g.chunk;
  }
}

void UnitShards::finish_backward(bool last) {
  // A group whose gradients were not all produced was never staged: name what is missing.
  std::vector<std::string> missing;
  for (auto& g : groups_) {
    if (g->reduced) continue;
    for (std::size_t k = 0; k < g->params.size(); ++k) {
      if (!g->params[k].grad().defined()) missing.push_back(g->names[k]);
      g->params[k].mutable_grad() = torch::Tensor();
    }
  }
  flush_reductions(true);
  for (auto& r : pending_) complete(*r);
  pending_.clear();
  for (auto& g : groups_) {
    g->reduced = false;
    g->grads_seen = 0;
  }
  for (auto& u : units_) u.staged = 0;
  if (!missing.empty()) {
    for (std::size_t u = 0; u < units_.size(); ++u) release(u);
    throw Error(fmt::format("{} parameter(s) received no gradient in this backward: {}", missing.size(),
                            fmt::join(missing, ", ")),
                "sharded strategies reduce each unit's gradients once all of them exist; every trainable "
                "parameter must take part in every forward");
  }
  if (last && replicate_ != nullptr && replicate_->world_size() > 1) {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> wire;
    std::vector<std::shared_ptr<CommWork>> works;
    for (auto& g : groups_) {
      wire.push_back(g->grad_shard.to(options_.precision.reduce));
      works.push_back(replicate_->all_reduce(wire.back(), ReduceOp::kAvg, /*async=*/true));
    }
    for (std::size_t i = 0; i < groups_.size(); ++i) {
      works[i]->wait();
      if (!wire[i].is_same(groups_[i]->grad_shard)) groups_[i]->grad_shard.copy_(wire[i]);
    }
  }
}

void UnitShards::zero_grad() {
  for (auto& g : groups_) g->grad_shard.zero_();
}

double UnitShards::square_norm() { return global_square_sum(masters_, shard_); }

double UnitShards::grad_square_norm() {
  std::vector<torch::Tensor> grads;
  for (auto& g : groups_) grads.push_back(g->grad_shard);
  return global_square_sum(grads, shard_);
}

std::pair<std::int64_t, std::int64_t> UnitShards::held_bytes() const {
  std::vector<torch::Tensor> params = masters_;
  std::vector<torch::Tensor> grads;
  for (const auto& g : groups_) {
    params.push_back(g->full);
    params.push_back(g->gather_source);
    grads.push_back(g->grad_shard);
    grads.push_back(g->staged);
  }
  return {storage_bytes(params), storage_bytes(grads)};
}

std::vector<std::pair<std::string, torch::Tensor>> UnitShards::full_parameters() {
  torch::NoGradGuard no_grad;
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
    auto& g = *groups_[gi];
    auto full = torch::empty({g.padded}, masters_[gi].options().requires_grad(false));
    shard_.all_gather(full, masters_[gi].detach());
    for (std::size_t k = 0; k < g.params.size(); ++k)
      out.emplace_back(g.names[k], full.narrow(0, g.offsets[k], g.params[k].numel()).view(g.params[k].sizes()).clone());
  }
  return out;
}

std::string UnitShards::describe() const {
  std::int64_t padding = 0;
  std::int64_t largest = 0;
  std::size_t sharded_units = 0;
  for (const auto& u : units_) sharded_units += u.groups.empty() ? 0 : 1;
  for (const auto& g : groups_) {
    padding += g->padded - g->numel;
    largest = std::max<std::int64_t>(largest, static_cast<std::int64_t>(g->full_bytes()));
  }
  std::string text = fmt::format("{} flat groups over {} units (largest gathered {} bytes, {} padding elements), "
                                 "shard group of {}",
                                 groups_.size(), sharded_units, largest, padding, shard_.world_size());
  if (replicate_ != nullptr) text += fmt::format(" replicated {}x", replicate_->world_size());
  return text;
}

}  // namespace strata
