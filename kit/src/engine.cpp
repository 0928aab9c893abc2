// The engine's step and state (engine.hpp); the layout and the units' gathering are in
// engine_units.cpp.
#include "strata/engine.hpp"
#include "strata/offload.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include <torch/utils.h>

#include "strata/errors.hpp"

namespace strata::inline kit_v3 {

void broadcast_module(torch::nn::Module& module, Comm& comm, const std::unordered_set<const void*>& skip) {
  if (comm.skips_collectives()) return;
  // In-place writes into leaf parameters must not be recorded by autograd.
  torch::NoGradGuard no_grad;
  for (auto& t : module.parameters())
    if (!skip.count(t.unsafeGetTensorImpl())) comm.broadcast(t, 0);
  for (auto& t : module.buffers()) comm.broadcast(t, 0);
}

void append_frozen_state(StateDict& state, const Model& model) {
  for (const auto& p : model.named_parameters())
    if (!p.value().requires_grad()) state.emplace_back(p.key(), state_dict_copy(p.value()));
  for (const auto& b : model.named_buffers()) state.emplace_back(b.key(), state_dict_copy(b.value()));
}

StateDict gathered_state_dict(const FlatGroups& groups, Comm* shard, const Model& model, bool keep,
                              const std::vector<std::pair<std::string, std::string>>& aliases) {
  std::map<std::string, torch::Tensor> values;  // the keeper: every trainable parameter, float32 on the CPU
  for (const auto& g : groups) {
    const auto full = full_master(*g, shard);
    if (!keep) continue;
    const auto views = g->views(full);
    for (std::size_t k = 0; k < g->size(); ++k) values[g->name(k)] = state_dict_copy(views[k]);
  }  // each gathered group is released before the next one
  if (!keep) return {};
  for (const auto& [alias, name] : aliases) values[alias] = values.at(name);
  StateDict state;
  for (const auto& p : model.named_parameters())
    if (p.value().requires_grad()) state.emplace_back(p.key(), values.at(p.key()));
  append_frozen_state(state, model);
  return state;
}

Engine::Engine() = default;

Engine::~Engine() {
  grad_hooks_.clear();  // no hook may fire into a reducer being destroyed
  reducer_.reset();
  // Pending all-gathers write into buffers of this object: complete them (errors were reported before).
  for (auto& unit : units_)
    for (auto& slot : unit.slots)
      try {
        if (slot.work) slot.work->wait();
      } catch (...) {
      }
  for (auto& g : param_gathers_)
    try {
      if (g.work) g.work->wait();
    } catch (...) {
    }
}

void Engine::take_over(const StrategySetup& s) {
  Plan plan;
  plan.owner = "replica";
  plan.reduce = false;
  take_over(s, std::move(plan));
}

void Engine::take_over(const StrategySetup& s, Plan plan) {
  plan_ = std::move(plan);
  model_ = s.model;
  device_ = s.device;
  comm_ = s.comm;
  precision_ = Precision(s.precision);
  mesh_ = Mesh::over(s, plan_.sharded == Sharded::kNothing ? 1 : plan_.shard_size, plan_.owner, plan_.shard_option);
  units_.assign(model_->units().size(), UnitState{});
  if (sharded_params())
    take_over_sharded();
  else
    take_over_replicated();
  if (plan_.offload == Offload::kOptimizer)
    optimizer_ = std::make_unique<OffloadedOptimizer>(masters(), s.optimizer);
  else
    optimizer_ = make_optimizer(masters(), s.optimizer);
  make_reducer();
}

void Engine::make_reducer() {
  grad_hooks_.clear();
  reducer_.reset();
  GradReducerOptions o;
  o.shard = master_shard();  // a one-rank shard group (NO_SHARD, world 1) reduces by a copy
  o.replicate = plan_.reduce ? mesh_.replicate() : nullptr;
  o.overlap = plan_.overlap;
  o.coalesce_bytes = plan_.reduce_coalesce_bytes;
  o.max_in_flight = plan_.reductions_in_flight > 0 ? plan_.reductions_in_flight : static_cast<int>(groups_.size());
  o.allow_missing = plan_.allow_missing;
  o.owner = plan_.owner;
  o.missing_fix = plan_.missing_fix;
  if (plan_.reduce_codec) {
    if (plan_.sharded != Sharded::kGradients && plan_.sharded != Sharded::kParameters)
      throw Error(plan_.owner + ": a reduce codec (Plan::reduce_codec) replaces the reduce-scatter of sharded "
                                "gradients; this plan does not shard them",
                  "Set Plan::sharded to Sharded::kGradients or Sharded::kParameters, or drop the codec");
    Comm* shard = master_shard();
    if (shard != nullptr && !shard->skips_collectives()) {
      o.codec = plan_.reduce_codec();
      const int k = mesh_.resolve_subgroup(plan_.reduce_subgroup, plan_.subgroup_option);
      if (k > 1 && k < shard->world_size()) {
        // The inner exchange on a stream of its own (hpZ's backward gathers use the sub-group's).
        if (!reduce_lane_) reduce_lane_ = mesh_.subgroup(k, plan_.subgroup_option).separate_stream();
        o.codec_inner = reduce_lane_.get();
        o.codec_outer = &mesh_.across_subgroups(k, plan_.subgroup_option);
      }
    }
  }
  // Launch order is the order backward completes the groups: replicated groups are laid out in it,
  // sharded ones in model order (the last unit's backward runs first).
  std::vector<FlatGroup*> launch;
  for (std::size_t i = 0; i < groups_.size(); ++i)
    launch.push_back(groups_[sharded_params() ? groups_.size() - 1 - i : i].get());
  o.on_group_complete = [this](std::size_t i) { gradient_ready(sharded_params() ? groups_.size() - 1 - i : i); };
  // The hooks report every gradient to the reducer installed when it arrives (use_reducer may swap it).
  for (std::size_t g = 0; g < launch.size(); ++g)
    for (std::size_t k = 0; k < launch[g]->size(); ++k)
      grad_hooks_.push_back(add_grad_ready_hook(launch[g]->param(k), [this, g, k] { reducer_->gradient_arrived(g, k); }));
  use_reducer(std::make_unique<GradReducer>(std::move(launch), precision_, std::move(o)));
}

void Engine::use_reducer(std::unique_ptr<Reducer> reducer) {
  if (!reducer) throw Error(plan_.owner + ": use_reducer needs a reducer (the plan's keeps gradients local when "
                                          "Plan::reduce is false)");
  reducer_ = std::move(reducer);
}

torch::Tensor Engine::loss_backward(Model& model, const Batch& batch, MicroStep micro) {
  model.train();
  if (&model != model_.get()) wait_params();  // another model is copied from these parameters
  auto output = &model == model_.get() ? run_units(batch.inputs, BatchContext::of(batch), /*train=*/true)
                                       : model.forward(precision_.compute(batch.inputs), BatchContext::of(batch));
  auto loss = model.loss(Precision::output(output), batch);
  micro.scaled(loss).backward();
  return loss.detach();
}

torch::Tensor Engine::forward_backward(const Batch& batch, MicroStep micro) {
  for (auto& u : units_) u.complete = 0;
  reducer_->begin_backward(micro);
  torch::Tensor loss;
  try {
    loss = loss_backward(*model_, batch, micro);
    reducer_->end_backward(micro);
  } catch (...) {
    for (std::size_t u = 0; u < units_.size(); ++u) release(u);
    throw;
  }
  after_backward(micro);
  return loss;
}

torch::Tensor Engine::finish_gradients(double max_norm) {
  if (max_norm == kNormNotNeeded) return {};  // one pass over every gradient saved
  const auto grads = group_master_grads(groups_);
  Comm* shard = master_shard();
  auto norm = (shard != nullptr ? global_square_sum(grads, *shard) : square_sum(grads, device_)).sqrt();
  clip_gradients(grads, norm, max_norm);
  return norm;
}

void Engine::step(double lr) {
  optimizer_->step(lr);
  masters_to_params();
  zero_grad();
  after_step();
}

void Engine::zero_grad() {
  for (auto& g : groups_) g->zero_grad();
}

const torch::Tensor& Engine::grad_view(std::size_t i) const {
  const auto [g, k] = locate_.at(i);
  return groups_[g]->grad_view(k);
}

void Engine::masters_to_params() {
  wait_params();  // the previous refresh (a strategy stepping twice without a forward between)
  torch::NoGradGuard no_grad;
  // A gathered group is refreshed from its master at its next gather; one that is allocated now
  // (kept gathered, or aliasing its master) is written here.
  for (auto& g : groups_)
    if (g->materialized()) g->master_to_full();
  Comm* shard = master_shard();
  if (sharded_params() || shard == nullptr || shard->skips_collectives()) return;
  // Replicated parameters with sharded masters (zero1, zero2): all-gather the owned chunks, each
  // group in place in a call of its own (allgather_bytes 0), or consecutive groups together up to
  // allgather_bytes per call through one rank-major staging buffer ([rank][group chunks]).
  // Groups are laid out in reverse parameter order; per unit, they are gathered in forward order
  // (the first unit's first), as the next forward waits for them.
  std::vector<std::size_t> order(groups_.size());
  for (std::size_t k = 0; k < order.size(); ++k) order[k] = plan_.wait_params_per_unit ? order.size() - 1 - k : k;
  auto& calls = param_gathers_;
  std::int64_t filled = 0;
  for (const auto g : order) {
    const auto bytes = static_cast<std::int64_t>(groups_[g]->full().nbytes());
    if (calls.empty() || plan_.allgather_bytes == 0 || filled + bytes > plan_.allgather_bytes) {
      calls.emplace_back();
      filled = 0;
    }
    calls.back().groups.push_back(g);
    filled += bytes;
  }
  placed_.resize(groups_.size());
  for (auto& place : placed_) place.refresh = -1;
  for (std::size_t i = 0; i < calls.size(); ++i)
    for (auto g : calls[i].groups) placed_[g].refresh = static_cast<std::ptrdiff_t>(i);
  for (auto& c : calls) {
    if (c.groups.size() == 1) {
      auto& g = *groups_[c.groups.front()];
      c.input = g.gather_input();  // the owned chunk of the output: in place
      c.output = g.full();
    } else {
      std::vector<torch::Tensor> chunks;
      for (auto i : c.groups) chunks.push_back(groups_[i]->chunk_of(groups_[i]->full(), groups_[i]->shard_rank()));
      c.input = torch::cat(chunks);
      c.output = torch::empty({c.input.numel() * shard->world_size()}, c.input.options());
    }
    c.work = shard->all_gather(c.output, c.input, /*async=*/true);
  }
  if (!plan_.wait_params_per_unit) wait_params();
}

void Engine::finish_param_gather(ParamGather& c) const {
  if (!c.work) return;
  c.work->wait();
  c.work.reset();
  if (c.groups.size() > 1) {
    const auto world = static_cast<std::int64_t>(c.output.numel() / c.input.numel());
    auto rows = c.output.view({world, c.input.numel()});
    std::int64_t offset = 0;
    for (auto i : c.groups) {
      auto& g = *groups_[i];
      g.full().view({world, g.chunk()}).copy_(rows.narrow(1, offset, g.chunk()));
      offset += g.chunk();
    }
  }
  c.input = c.output = torch::Tensor();
}

void Engine::wait_params(std::size_t unit) {
  if (param_gathers_.empty()) return;
  if (unit >= units_.size()) return wait_params();
  torch::NoGradGuard no_grad;
  for (const auto g : units_[unit].replicated_groups)
    if (const auto i = placed_.at(g).refresh; i >= 0) finish_param_gather(param_gathers_[static_cast<std::size_t>(i)]);
  if (std::all_of(param_gathers_.begin(), param_gathers_.end(), [](const ParamGather& c) { return !c.work; }))
    param_gathers_.clear();
}

void Engine::wait_params() const {
  if (param_gathers_.empty()) return;
  torch::NoGradGuard no_grad;
  for (auto& c : param_gathers_) finish_param_gather(c);
  param_gathers_.clear();
}

torch::Tensor Engine::evaluate(const Batch& batch) {
  model_->eval();
  torch::NoGradGuard no_grad;
  return Precision::output(run_units(batch.inputs, BatchContext::of(batch), /*train=*/false));
}

double Engine::parameter_norm() {
  const auto m = masters();
  Comm* shard = master_shard();
  const auto sum = shard != nullptr ? global_square_sum(m, *shard, SumPrecision::kExact)
                                    : square_sum(m, device_, SumPrecision::kExact);
  return std::sqrt(sum.item<double>());
}

ModelStateBytes Engine::memory() const {
  // An all-gather's input may be the float32 master itself: each storage is counted once.
  std::vector<torch::Tensor> params;
  for (const auto& unit : units_)
    for (const auto& slot : unit.slots)
      for (const auto* t : {&slot.input, &slot.encoded, &slot.subgroup_copy})
        if (t->defined()) params.push_back(*t);
  for (const auto& g : groups_)
    for (auto& t : g->param_tensors()) params.push_back(t);
  const auto grads = group_bytes(groups_).second + (reducer_ ? reducer_->in_flight_bytes() : 0);
  ModelStateBytes bytes{storage_bytes(params), grads, optimizer_ ? optimizer_->state_bytes() : 0};
  if (const auto* host = dynamic_cast<const OffloadedOptimizer*>(optimizer_.get())) {
    bytes.extra = {{"host_masters", host->host_master_bytes()}, {"host_optimizer", bytes.optimizer}};
    bytes.optimizer = 0;
  }
  return bytes;
}

StateDict Engine::full_state_dict() {
  wait_params();
  return gathered_state_dict(groups_, master_shard(), *model_, comm_->rank() == 0, aliases_);
}

std::vector<TensorPiece> Engine::state_pieces(StateAccess access, bool optimizer) {
  wait_params();
  PieceOwner owner;
  owner.first = comm_->rank() == 0;
  owner.replica = mesh_.replica();
  owner.replicas = mesh_.replicas();
  auto pieces = flat_state_pieces(groups_, optimizer ? optimizer_.get() : nullptr, access, owner);
  for (auto& p : frozen_state_pieces(*model_, access, owner)) pieces.push_back(std::move(p));
  return pieces;
}

void Engine::state_loaded() {
  masters_to_params();
  optimizer_->state_loaded();
}

std::vector<std::uint32_t> Engine::replica_digests() const {
  if (sharded_params()) return {};  // no rank holds a whole replica to compare
  wait_params();
  std::uint32_t crc = 0;
  for (const auto& g : groups_) crc = tensor_digest(g->full(), crc);
  for (const auto& b : model_->buffers()) crc = tensor_digest(b, crc);
  return {crc};
}

}  // namespace strata::inline kit_v3
