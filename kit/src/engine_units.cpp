// The engine's layout (replicated buckets, or units sharded over the mesh) and the gathering of
// sharded units around their forward and backward (engine.hpp).
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include <ATen/record_function.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/utils.h>

#include "strata/buckets.hpp"
#include "strata/engine.hpp"
#include "strata/errors.hpp"

namespace strata::inline kit_v3 {

namespace {

/// The tensors (parameters and buffers) registered inside the model's units.
std::unordered_set<const void*> unit_tensors(const Model& model) {
  std::unordered_set<const void*> in_units;
  for (const auto& unit : model.units()) {
    for (const auto& p : unit->parameters()) in_units.insert(p.unsafeGetTensorImpl());
    for (const auto& b : unit->buffers()) in_units.insert(b.unsafeGetTensorImpl());
  }
  return in_units;
}

/// Trainable parameters outside every unit: sharding by unit cannot place them, so setup refuses
/// them by name. (A parameter two units share is placed with the first: take_over_unit.)
void check_shardable(const Model& model, const std::unordered_set<const void*>& in_units, const std::string& owner) {
  std::vector<std::string> outside;
  for (const auto& [name, p] : unique_trainable_parameters(model))
    if (!in_units.count(p.unsafeGetTensorImpl())) outside.push_back(name);
  if (!outside.empty())
    throw Error(owner + ": trainable parameter(s) registered on the model outside every unit: " +
                    fmt::format("{}", fmt::join(outside, ", ")) + ".",
                "Sharded parameters are placed unit by unit; register these parameters inside a unit (or freeze "
                "them), or use a strategy that replicates parameters (ddp, zero1, zero2)");
}

}  // namespace

void Engine::take_over_replicated() {
  model_->to(device_);
  broadcast_module(*model_, *comm_);
  precision_.cast_frozen_state(*model_);
  for (auto& [name, p] : unique_trainable_parameters(*model_, &aliases_)) {
    params_.push_back(p);
    param_names_.push_back(name);
  }
  Comm* shard = master_shard();
  const int n = shard != nullptr ? shard->world_size() : 1;
  const int r = shard != nullptr ? shard->rank() : 0;
  const auto grads = plan_.sharded == Sharded::kGradients ? GradHolding::kShard : GradHolding::kFull;
  locate_.resize(params_.size());
  for (const auto& bucket : assign_buckets(params_, plan_.group_bytes)) {
    std::vector<torch::Tensor> params;
    std::vector<std::string> names;
    for (auto i : bucket) {
      locate_[i] = {groups_.size(), params.size()};
      params.push_back(params_[i]);
      names.push_back(param_names_[i]);
    }
    groups_.push_back(std::make_unique<FlatGroup>(std::move(params), std::move(names),
                                                  FlatGroupOptions{r, n, Residency::kPersistent, grads, precision_}));
  }
  placed_.assign(groups_.size(), GroupPlace{});
  // The groups each unit's forward reads (wait_params); a parameter outside every unit counts as unit 0's.
  std::unordered_map<const void*, std::size_t> index_of;
  for (std::size_t i = 0; i < params_.size(); ++i) index_of[params_[i].unsafeGetTensorImpl()] = i;
  std::vector<bool> placed(params_.size(), false);
  auto add = [&](std::size_t u, std::size_t i) {
    auto& list = units_[u].replicated_groups;
    if (std::find(list.begin(), list.end(), locate_[i].first) == list.end()) list.push_back(locate_[i].first);
    placed[i] = true;
  };
  for (std::size_t u = 0; u < model_->units().size(); ++u)
    for (const auto& p : model_->units()[u]->parameters())
      if (const auto it = index_of.find(p.unsafeGetTensorImpl()); it != index_of.end()) add(u, it->second);
  if (!units_.empty())
    for (std::size_t i = 0; i < params_.size(); ++i)
      if (!placed[i]) add(0, i);
}

void Engine::take_over_sharded() {
  const auto in_units = unit_tensors(*model_);  // identities: moving a unit to the device keeps them (set_data)
  check_shardable(*model_, in_units, plan_.owner);
  Comm& shard = mesh_.shard();
  gather_lane_ = shard.separate_stream();
  for (std::size_t u = 0; u < units_.size(); ++u) {
    auto& plan = units_[u].plan;
    plan = plan_.units;
    if (plan_.unit) plan_.unit(u, model_->unit_names()[u], plan);
  }
  {
    std::unordered_map<const void*, std::pair<std::size_t, std::string>> holder;
    for (std::size_t u = 0; u < units_.size(); ++u) take_over_unit(u, holder);
  }
  // A unit whose parameters a later one reads (tied) stays gathered until that one has run: its
  // after_forward is kNone, so its gradients, summed over both uses, arrive while it is gathered.
  for (std::size_t u = 0; u < units_.size(); ++u)
    for (const auto from : units_[u].reads_from) {
      units_[from].read_until = std::max(units_[from].read_until, u);
      units_[from].plan.after_forward = Reshard::kNone;
      // A checkpointed unit's backward is a nested one: the tied gradient would arrive twice.
      if (model_->checkpointed(u))
        throw Error(plan_.owner + ": unit " + model_->unit_names()[u] + " reads a parameter of unit " +
                        model_->unit_names()[from] + " (tied weights) and is checkpointed ([train] "
                        "activation_checkpointing): its recomputed backward would report the tied gradient before "
                        "the other unit's share is added.",
                    "Checkpoint other units (activation_checkpointing = N that skips it), untie the weights, or use a "
                    "strategy that replicates parameters (ddp, zero1, zero2)");
    }
  if (plan_.keep_last_unit_gathered)
    for (std::size_t u = units_.size(); u-- > 0;)
      if (gathered_unit(u)) {
        units_[u].plan.after_forward = Reshard::kNone;  // its backward follows at once
        break;
      }
  // Sub-groups in unit order, the same on every rank (their creation is collective).
  for (std::size_t u = 0; u < units_.size(); ++u) {
    auto& plan = units_[u].plan;
    if (plan.after_forward != Reshard::kSubgroup) continue;
    units_[u].subgroup = &mesh_.subgroup(plan.after_forward.ranks, plan_.subgroup_option);
    // One rank per sub-group keeps the whole unit: it simply stays gathered.
    if (units_[u].subgroup->world_size() == 1) plan.after_forward = Reshard::kNone;
  }
  // What the model holds outside its units (buffers, frozen parameters): placed like a unit's.
  {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> rest = model_->parameters();
    for (const auto& b : model_->buffers()) rest.push_back(b);
    for (auto& t : rest) {
      if (in_units.count(t.unsafeGetTensorImpl())) continue;
      t.set_data(t.to(device_));
      if (!comm_->skips_collectives()) comm_->broadcast(t, 0);
      if (precision_.mixed() && t.is_floating_point()) t.set_data(t.to(precision_.param_dtype()));
    }
  }
  placed_.resize(groups_.size());
  for (std::size_t u = 0; u < units_.size(); ++u) {
    units_[u].slots.resize(units_[u].groups.size());
    for (auto g : units_[u].groups) placed_[g].unit = u;
  }
  if (plan_.gather_codec) codec_ = plan_.gather_codec();
}

void Engine::take_over_unit(std::size_t u,
                            std::unordered_map<const void*, std::pair<std::size_t, std::string>>& holder) {
  auto& unit = *model_->units()[u];
  Comm& shard = mesh_.shard();
  // Parameters an earlier unit placed (tied): views of its flat groups already, neither moved,
  // sent nor placed again; this unit reads them from that unit's gathered storage.
  std::unordered_set<const void*> placed;
  for (const auto& p : unit.named_parameters()) {
    const auto it = holder.find(p.value().unsafeGetTensorImpl());
    if (it == holder.end() || it->second.first == u) continue;
    placed.insert(p.value().unsafeGetTensorImpl());
    aliases_.emplace_back(model_->unit_names()[u] + "." + p.key(), it->second.second);
    auto& from = units_[u].reads_from;
    if (std::find(from.begin(), from.end(), it->second.first) == from.end()) from.push_back(it->second.first);
  }
  unit.to(device_);  // a tied parameter is on the device already: to() leaves it as it is
  broadcast_module(unit, *comm_, placed);
  precision_.cast_frozen_state(unit);
  std::vector<torch::Tensor> params;
  std::vector<std::string> names;
  std::int64_t filled = 0;
  auto close_group = [&] {
    if (params.empty()) return;
    units_[u].groups.push_back(groups_.size());
    groups_.push_back(std::make_unique<FlatGroup>(
        std::move(params), std::move(names),
        FlatGroupOptions{shard.rank(), shard.world_size(), Residency::kGathered, GradHolding::kShard, precision_,
                         /*gather_unsharded=*/!shard.skips_collectives()}));
    params.clear();
    names.clear();
    filled = 0;
  };
  // Cut the unit into groups of about group_bytes (one group when it is 0). The FlatGroup takes
  // the parameters over: their storage on the device is freed as each is built.
  for (const auto& p : unit.named_parameters()) {
    if (!p.value().requires_grad()) continue;
    const auto [it, fresh] = holder.try_emplace(p.value().unsafeGetTensorImpl(), u, model_->unit_names()[u] + "." + p.key());
    if (!fresh) {  // tied within this unit: one tensor under two names
      if (it->second.first == u) aliases_.emplace_back(model_->unit_names()[u] + "." + p.key(), it->second.second);
      continue;
    }
    const auto bytes = static_cast<std::int64_t>(p.value().nbytes());
    if (plan_.group_bytes > 0 && filled > 0 && filled + bytes > plan_.group_bytes) close_group();
    params.push_back(p.value());
    names.push_back(model_->unit_names()[u] + "." + p.key());
    filled += bytes;
  }
  close_group();
}

torch::Tensor Engine::run_units(const torch::Tensor& input, const BatchContext& context, bool train) {
  auto x = precision_.compute(input);
  const bool backward = train && torch::GradMode::is_enabled();
  for (std::size_t u = 0; u < units_.size(); ++u) {
    RECORD_USER_SCOPE("strata forward " + model_->unit_names()[u]);  // named only while a profiler records
    wait_params(u);  // not a hook: a strategy's own cannot skip it
    before_unit_forward(u);
    x = model_->run_unit(u, x, context);
    if (backward && x.requires_grad()) x.register_hook([this, u](const torch::Tensor&) { before_unit_backward(u); });
    after_unit_forward(u, backward);
  }
  return x;
}

void Engine::before_unit_forward(std::size_t unit) {
  for (const auto from : units_[unit].reads_from) gather(from), wait_gathered(from);  // tied: still gathered
  if (!gathered_unit(unit)) return;
  gather(unit);
  prefetch(unit, /*forward=*/true);  // the next units' all-gathers run while this one computes
  wait_gathered(unit);
}

void Engine::after_unit_forward(std::size_t unit, bool backward_follows) {
  if (!backward_follows)  // tied: a unit read by later ones is freed after the last of them
    for (const auto from : units_[unit].reads_from)
      if (units_[from].read_until == unit) release(from);
  if (!gathered_unit(unit)) return;
  if (!backward_follows) {
    if (units_[unit].read_until <= unit) release(unit);
    return;
  }
  switch (units_[unit].plan.after_forward.kind) {
    case Reshard::kNone: return;
    case Reshard::kShardGroup: return release(unit);
    case Reshard::kSubgroup: return reshard_to_subgroup(unit);
  }
}

void Engine::before_unit_backward(std::size_t unit) {
  for (const auto from : units_[unit].reads_from) gather(from), wait_gathered(from);  // tied: still gathered
  if (!gathered_unit(unit)) return;
  gather(unit);
  prefetch(unit, /*forward=*/false);
  wait_gathered(unit);
}

void Engine::gradient_ready(std::size_t group) {
  if (!sharded_params()) return;
  const std::size_t u = placed_[group].unit;
  if (++units_[u].complete == units_[u].groups.size()) release(u);  // every gradient of the unit exists
}

void Engine::after_backward(MicroStep) {
  // A unit whose backward did not run (its output did not need a gradient) is still gathered.
  for (std::size_t u = 0; u < units_.size(); ++u) release(u);
}

void Engine::prefetch(std::size_t unit, bool forward) {
  const auto depth = static_cast<std::size_t>(std::max(0, forward ? plan_.forward_prefetch : plan_.backward_prefetch));
  std::size_t issued = 0;
  if (forward) {
    for (std::size_t k = unit + 1; k < units_.size() && issued < depth; ++k)
      if (gathered_unit(k)) gather(k), ++issued;
  } else {
    for (std::size_t k = unit; k-- > 0 && issued < depth;)
      if (gathered_unit(k)) gather(k), ++issued;
  }
}

void Engine::gather(std::size_t unit) {
  torch::NoGradGuard no_grad;
  auto& state = units_.at(unit);
  for (std::size_t k = 0; k < state.groups.size(); ++k) {
    auto& g = *groups_[state.groups[k]];
    auto& slot = state.slots[k];
    if (g.materialized() || slot.work) continue;
    g.allocate_full();
    auto full = g.full();
    Comm* lane = gather_lane_.get();
    bool local = mesh_.shard().skips_collectives();
    const bool from_subgroup = slot.subgroup_copy.defined();
    if (from_subgroup) {
      // From the sub-group copies: member s holds the s-th slice of full, so they make the whole unit.
      lane = state.subgroup;
      local = lane->skips_collectives();
      slot.input = std::move(slot.subgroup_copy);
      slot.subgroup_copy = torch::Tensor();
    } else {
      slot.input = local ? g.master() : g.gather_input();
    }
    if (local) {
      full.copy_(slot.input);
      slot.input = torch::Tensor();
      continue;
    }
    if (codec_) {  // what travels is the codec's; decoded when waited for
      slot.input = codec_->encode(slot.input);
      slot.encoded_ranks = lane->world_size();
      slot.encoded = torch::empty({slot.input.numel() * lane->world_size()}, slot.input.options());
      slot.work = lane->all_gather(slot.encoded, slot.input, /*async=*/true);
      continue;
    }
    slot.work = lane->all_gather(full, slot.input, /*async=*/true);
  }
}

void Engine::wait_gathered(std::size_t unit) {
  auto& state = units_.at(unit);
  for (std::size_t k = 0; k < state.groups.size(); ++k) {
    auto& slot = state.slots[k];
    if (!slot.work) continue;
    slot.work->wait();  // the compute stream waits; the host does not
    slot.work.reset();
    slot.input = torch::Tensor();
    if (slot.encoded.defined()) {
      torch::NoGradGuard no_grad;
      auto full = groups_[state.groups[k]]->full();
      codec_->decode(slot.encoded, full, slot.encoded_ranks);
      slot.encoded = torch::Tensor();
    }
  }
}

void Engine::release(std::size_t unit) {
  // The gathered storage is freed on the compute stream: the all-gathers writing it are waited
  // for first (free_storage's contract), so the allocator reuses it only after them.
  wait_gathered(unit);
  auto& state = units_.at(unit);
  for (std::size_t k = 0; k < state.groups.size(); ++k) {
    if (state.slots[k].work) throw Error(plan_.owner + ": internal error: a unit freed before its all-gather completed");
    groups_[state.groups[k]]->release_full();
    state.slots[k].subgroup_copy = torch::Tensor();
  }
}

void Engine::reshard_to_subgroup(std::size_t unit) {
  wait_gathered(unit);
  auto& state = units_.at(unit);
  Comm& sub = *state.subgroup;
  torch::NoGradGuard no_grad;
  for (std::size_t k = 0; k < state.groups.size(); ++k) {
    auto& g = *groups_[state.groups[k]];
    if (g.aliased()) continue;  // the master is the whole unit: nothing is ever freed
    const std::int64_t part = g.padded() / sub.world_size();
    state.slots[k].subgroup_copy = g.full().narrow(0, sub.rank() * part, part).clone();
    g.release_full();
  }
}

std::string Engine::describe() const {
  std::int64_t padding = 0, largest = 0;
  for (const auto& g : groups_) {
    padding += g->padded() - g->numel();
    largest = std::max<std::int64_t>(largest, g->padded() * static_cast<std::int64_t>(c10::elementSize(
                                                                 precision_.param_dtype())));
  }
  std::string text = std::to_string(groups_.size()) + " flat groups";
  if (sharded_params()) {
    std::size_t sharded_units = 0, subgroup_units = 0;
    int subgroup_size = 0;
    for (std::size_t u = 0; u < units_.size(); ++u) {
      if (units_[u].groups.empty()) continue;
      ++sharded_units;
      if (units_[u].plan.after_forward != Reshard::kSubgroup) continue;
      ++subgroup_units;
      subgroup_size = units_[u].subgroup->world_size();
    }
    text += " over " + std::to_string(sharded_units) + " units (largest gathered " + std::to_string(largest) + " bytes)";
    if (subgroup_units > 0)
      text += ", " + std::to_string(subgroup_units) + " resharded after forward to sub-groups of " +
              std::to_string(subgroup_size);
  }
  text += ", " + std::to_string(padding) + " padding elements, " + mesh_.describe();
  if (plan_.reduce && groups_.size() > 0)
    text += ", " + (plan_.reductions_in_flight > 0 ? std::to_string(plan_.reductions_in_flight) : std::string("all")) +
            " reductions in flight";
  return text;
}

}  // namespace strata::inline kit_v3
