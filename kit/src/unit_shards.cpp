#include "strata/unit_shards.hpp"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include <torch/utils.h>

#include "strata/errors.hpp"
#include "strata/optim.hpp"
#include "strata/replica.hpp"

namespace strata::inline kit_v1 {

namespace {

/// "a, b, c"
std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}


/// Trainable parameters outside every unit, and parameters that two names share: sharding by unit
/// cannot place either, so setup refuses them by name.
void check_shardable(const Model& model, const std::string& owner) {
  std::unordered_set<const void*> in_units;
  for (const auto& unit : model.units())
    for (const auto& p : unit->parameters()) in_units.insert(p.unsafeGetTensorImpl());
  std::vector<std::string> outside, tied;
  std::unordered_map<const void*, std::string> first;
  for (const auto& p : model.named_parameters()) {
    if (!p.value().requires_grad()) continue;
    const void* impl = p.value().unsafeGetTensorImpl();
    if (!in_units.count(impl)) outside.push_back(p.key());
    if (auto [it, fresh] = first.emplace(impl, p.key()); !fresh) tied.push_back(p.key() + " = " + it->second);
  }
  if (!outside.empty())
    throw Error(owner + ": trainable parameter(s) registered on the model outside every unit: " + join(outside) + ".",
                "zero3 and fsdp shard the model unit by unit; register these parameters inside a unit (or freeze "
                "them), or use a replica strategy (ddp, zero1, zero2)");
  if (!tied.empty())
    throw Error(owner + ": parameters shared under two names (tied weights): " + join(tied) + ".",
                "zero3 and fsdp shard each unit's parameters on their own and cannot shard one tensor for two "
                "units; untie them, or use a replica strategy (ddp, zero1, zero2), which hold a tied parameter once");
}

}  // namespace

UnitShards::UnitShards(std::shared_ptr<Model> model, torch::Device device, Comm& job, Comm& shard, Comm* replicate,
                       UnitShardOptions options)
    : model_(std::move(model)),
      device_(device),
      shard_(shard),
      replicate_(replicate),
      options_(std::move(options)),
      precision_(options_.precision) {
  check_shardable(*model_, options_.owner);
  gather_lane_ = shard_.separate_stream();
  units_.resize(model_->units().size());
  for (std::size_t u = 0; u < units_.size(); ++u) take_over_unit(u, job);
  // What the model holds outside its units (buffers, frozen parameters): placed like a unit's.
  {
    std::unordered_set<const void*> in_units;
    for (const auto& unit : model_->units()) {
      for (const auto& p : unit->parameters()) in_units.insert(p.unsafeGetTensorImpl());
      for (const auto& b : unit->buffers()) in_units.insert(b.unsafeGetTensorImpl());
    }
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> rest = model_->parameters();
    for (const auto& b : model_->buffers()) rest.push_back(b);
    for (auto& t : rest) {
      if (in_units.count(t.unsafeGetTensorImpl())) continue;
      t.set_data(t.to(device_));
      if (!job.skips_collectives()) job.broadcast(t, 0);
      if (precision_.mixed() && t.is_floating_point()) t.set_data(t.to(precision_.param_dtype()));
    }
  }
  gathers_.resize(groups_.size());
  gather_inputs_.resize(groups_.size());
  unit_of_.resize(groups_.size());
  for (std::size_t u = 0; u < units_.size(); ++u)
    for (auto g : units_[u].groups) unit_of_[g] = u;
  // Reductions in launch order: backward completes the last unit first.
  std::vector<FlatGroup*> launch;
  for (std::size_t g = groups_.size(); g-- > 0;) launch.push_back(groups_[g].get());
  GradReducerOptions r;
  r.shard = &shard_;  // a one-rank shard group (NO_SHARD, world 1) reduces by a copy
  r.replicate = replicate_;
  r.overlap = options_.overlap;
  r.coalesce_bytes = options_.reduce_cap_bytes;
  r.max_in_flight = options_.reductions_in_flight;
  r.owner = options_.owner;
  r.missing_fix = "sharded strategies reduce each unit's gradients once all of them exist; every trainable "
                  "parameter must take part in every forward";
  r.on_group_complete = [this](std::size_t i) { group_complete(i); };
  reducer_ = std::make_unique<GradReducer>(std::move(launch), precision_, std::move(r));
}

void UnitShards::take_over_unit(std::size_t u, Comm& job) {
  auto& unit = *model_->units()[u];
  unit.to(device_);
  broadcast_module(unit, job);
  precision_.cast_frozen_state(unit);
  std::vector<torch::Tensor> params;
  std::vector<std::string> names;
  std::int64_t filled = 0;
  auto close_group = [&] {
    if (params.empty()) return;
    units_[u].groups.push_back(groups_.size());
    groups_.push_back(std::make_unique<FlatGroup>(
        std::move(params), std::move(names),
        FlatGroupOptions{shard_.rank(), shard_.world_size(), Residency::kGathered, GradHolding::kShard, precision_,
                         /*gather_unsharded=*/!shard_.skips_collectives()}));
    params.clear();
    names.clear();
    filled = 0;
  };
  // Cut the unit into groups of about group_cap_bytes (one group when the cap is 0). The
  // FlatGroup takes the parameters over: their storage on the device is freed as each is built.
  for (const auto& p : unit.named_parameters()) {
    if (!p.value().requires_grad()) continue;
    const auto bytes = static_cast<std::int64_t>(p.value().nbytes());
    if (options_.group_cap_bytes > 0 && filled > 0 && filled + bytes > options_.group_cap_bytes) close_group();
    params.push_back(p.value());
    names.push_back(model_->unit_names()[u] + "." + p.key());
    filled += bytes;
  }
  close_group();
}

UnitShards::~UnitShards() {
  reducer_.reset();
  // Pending all-gathers write into buffers of this object: complete them (errors were reported before).
  for (auto& w : gathers_)
    try {
      if (w) w->wait();
    } catch (...) {
    }
}

void UnitShards::gather(std::size_t unit) {
  torch::NoGradGuard no_grad;
  for (auto gi : units_[unit].groups) {
    auto& g = *groups_[gi];
    if (g.materialized() || gathers_[gi]) continue;
    g.allocate_full();
    if (shard_.skips_collectives()) {
      g.full().copy_(g.master());
      continue;
    }
    gather_inputs_[gi] = g.gather_input();
    auto full = g.full();
    gathers_[gi] = gather_lane_->all_gather(full, gather_inputs_[gi], /*async=*/true);
  }
}

void UnitShards::wait_gathered(std::size_t unit) {
  for (auto gi : units_[unit].groups) {
    if (!gathers_[gi]) continue;
    gathers_[gi]->wait();  // the compute stream waits; the host does not
    gathers_[gi].reset();
    gather_inputs_[gi] = torch::Tensor();
  }
}

void UnitShards::release(std::size_t unit) {
  // The gathered storage is freed on the compute stream: the all-gathers writing it are waited
  // for first (free_storage's contract), so the allocator reuses it only after them.
  wait_gathered(unit);
  for (auto gi : units_[unit].groups) {
    if (gathers_[gi]) throw Error(options_.owner + ": internal error: a unit freed before its all-gather completed");
    groups_[gi]->release_full();
  }
}

torch::Tensor UnitShards::forward(const torch::Tensor& input, const BatchContext& context, bool train) {
  const auto& units = model_->units();
  auto x = precision_.compute(input);
  const bool backward = train && torch::GradMode::is_enabled();
  for (std::size_t u = 0; u < units.size(); ++u) {
    if (units_[u].groups.empty()) {
      x = model_->run_unit(u, x, context);
      continue;
    }
    gather(u);
    // Prefetch: the next units' all-gathers run while this unit computes.
    for (std::size_t k = u + 1, issued = 0;
         k < units.size() && issued < static_cast<std::size_t>(options_.forward_prefetch); ++k)
      if (!units_[k].groups.empty()) {
        gather(k);
        ++issued;
      }
    wait_gathered(u);
    x = model_->run_unit(u, x, context);
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

void UnitShards::group_complete(std::size_t launch_index) {
  const std::size_t u = unit_of_[groups_.size() - 1 - launch_index];
  if (++units_[u].complete == units_[u].groups.size()) release(u);  // every gradient of the unit exists
}

void UnitShards::begin_backward(MicroStep micro) {
  for (auto& u : units_) u.complete = 0;
  reducer_->begin_backward(micro);
}

void UnitShards::end_backward(MicroStep micro) {
  try {
    reducer_->end_backward(micro);
  } catch (...) {
    for (std::size_t u = 0; u < units_.size(); ++u) release(u);
    throw;
  }
  // A unit whose backward did not run (its output did not need a gradient) is still gathered.
  for (std::size_t u = 0; u < units_.size(); ++u) release(u);
}

void UnitShards::zero_grad() {
  for (auto& g : groups_) g->zero_grad();
}

torch::Tensor UnitShards::square_norm() {
  return global_square_sum(group_masters(groups_), shard_, SumPrecision::kExact);
}

torch::Tensor UnitShards::grad_square_norm() { return global_square_sum(group_master_grads(groups_), shard_); }

std::pair<std::int64_t, std::int64_t> UnitShards::held_bytes() const {
  // An all-gather's input may be the float32 master itself: count each storage once.
  std::vector<torch::Tensor> params = gather_inputs_;
  for (const auto& g : groups_)
    for (auto& t : g->param_tensors()) params.push_back(t);
  return {storage_bytes(params), group_bytes(groups_).second + reducer_->in_flight_bytes()};
}

std::string UnitShards::describe() const {
  std::int64_t padding = 0;
  std::int64_t largest = 0;
  std::size_t sharded_units = 0;
  for (const auto& u : units_) sharded_units += u.groups.empty() ? 0 : 1;
  for (const auto& g : groups_) {
    padding += g->padded() - g->numel();
    largest = std::max<std::int64_t>(largest, g->padded() * static_cast<std::int64_t>(c10::elementSize(
                                                                 precision_.param_dtype())));
  }
  std::string text = std::to_string(groups_.size()) + " flat groups over " + std::to_string(sharded_units) +
                     " units (largest gathered " + std::to_string(largest) + " bytes, " + std::to_string(padding) +
                     " padding elements), shard group of " + std::to_string(shard_.world_size()) + ", " +
                     std::to_string(options_.reductions_in_flight) + " reductions in flight";
  if (replicate_ != nullptr) text += " replicated " + std::to_string(replicate_->world_size()) + "x";
  return text;
}

}  // namespace strata::inline kit_v1
