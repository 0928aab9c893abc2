#include "strata/replica.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>

#include <torch/utils.h>

#include "strata/errors.hpp"

namespace strata::inline kit_v1 {

void broadcast_module(torch::nn::Module& module, Comm& comm) {
  if (comm.skips_collectives()) return;
  // In-place writes into leaf parameters must not be recorded by autograd.
  torch::NoGradGuard no_grad;
  for (auto& t : module.parameters()) comm.broadcast(t, 0);
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

void ReplicaStrategy::take_over(const StrategySetup& s, ReplicaLayout layout) {
  model_ = s.model;
  device_ = s.device;
  comm_ = s.comm;
  rank_ = comm_->rank();
  precision_ = Precision(s.precision);
  layout_ = layout;
  model_->to(device_);
  broadcast_module(*model_, *comm_);
  precision_.cast_frozen_state(*model_);
  for (auto& [name, p] : unique_trainable_parameters(*model_, &aliases_)) {
    params_.push_back(p);
    param_names_.push_back(name);
  }
  const int n = layout_.shard != nullptr ? layout_.shard->world_size() : 1;
  const int r = layout_.shard != nullptr ? layout_.shard->rank() : 0;
  locate_.resize(params_.size());
  for (const auto& bucket : assign_buckets(params_, layout_.bucket_cap_bytes)) {
    std::vector<torch::Tensor> params;
    std::vector<std::string> names;
    for (auto i : bucket) {
      locate_[i] = {groups_.size(), params.size()};
      params.push_back(params_[i]);
      names.push_back(param_names_[i]);
    }
    groups_.push_back(std::make_unique<FlatGroup>(std::move(params), std::move(names),
                                                  FlatGroupOptions{r, n, Residency::kPersistent, layout_.grads,
                                                                   precision_}));
  }
  optimizer_ = make_optimizer(masters(), s.optimizer);
  reduce_gradients({});  // no collectives: float32 accumulation only
}

void ReplicaStrategy::reduce_gradients(GradReducerOptions options) {
  reducer_.reset();  // its hooks go first
  options.shard = layout_.shard;
  std::vector<FlatGroup*> groups;
  for (auto& g : groups_) groups.push_back(g.get());
  use_reducer(std::make_unique<GradReducer>(std::move(groups), precision_, std::move(options)));
}

void ReplicaStrategy::use_reducer(std::unique_ptr<Reducer> reducer) {
  if (!reducer) throw Error("use_reducer: a strategy needs a reducer (reduce_gradients({}) keeps gradients local)");
  reducer_ = std::move(reducer);
}

torch::Tensor ReplicaStrategy::replica_forward_backward(const Batch& batch, MicroStep micro) {
  model_->train();
  auto output = Precision::output(model_->forward(precision_.compute(batch.inputs), BatchContext::of(batch)));
  auto loss = model_->loss(output, batch);
  reducer_->begin_backward(micro);
  micro.scaled(loss).backward();
  reducer_->end_backward(micro);
  return loss.detach();
}

torch::Tensor ReplicaStrategy::forward_backward(const Batch& batch, MicroStep micro) {
  return replica_forward_backward(batch, micro);
}

std::vector<torch::Tensor> ReplicaStrategy::masters() const { return group_masters(groups_); }

torch::Tensor ReplicaStrategy::finish_gradients(double max_norm) {
  if (max_norm == kNormNotNeeded) return {};  // one pass over every gradient saved
  const auto grads = group_master_grads(groups_);
  auto norm = (layout_.shard != nullptr ? global_square_sum(grads, *layout_.shard) : square_sum(grads, device_)).sqrt();
  clip_gradients(grads, norm, max_norm);
  return norm;
}

void ReplicaStrategy::step(double lr) {
  optimizer_->step(lr);
  masters_to_params();
  zero_grad();
}

void ReplicaStrategy::zero_grad() {
  for (auto& g : groups_) g->zero_grad();
}

const torch::Tensor& ReplicaStrategy::grad_view(std::size_t i) const {
  const auto [g, k] = locate_.at(i);
  return groups_[g]->grad_view(k);
}

void ReplicaStrategy::masters_to_params() {
  torch::NoGradGuard no_grad;
  for (auto& g : groups_) g->master_to_full();
  if (layout_.shard == nullptr || layout_.shard->skips_collectives()) return;
  // All-gather the owned chunks: each group in place, in a call of its own (allgather_cap_bytes_
  // 0), or consecutive groups together up to allgather_cap_bytes_ per call through one rank-major
  // staging buffer ([rank][group chunks]) of that size.
  const int world = layout_.shard->world_size();
  struct Call {
    std::vector<std::size_t> groups;
    torch::Tensor input, output;
    std::shared_ptr<CommWork> work;
  };
  std::vector<Call> calls;
  std::int64_t filled = 0;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const auto bytes = static_cast<std::int64_t>(groups_[g]->full().nbytes());
    if (calls.empty() || allgather_cap_bytes_ == 0 || filled + bytes > allgather_cap_bytes_) {
      calls.emplace_back();
      filled = 0;
    }
    calls.back().groups.push_back(g);
    filled += bytes;
  }
  for (auto& c : calls) {
    if (c.groups.size() == 1) {
      auto& g = *groups_[c.groups.front()];
      c.input = g.gather_input();  // the output overlaps the owned chunk
      c.output = g.full();
    } else {
      std::vector<torch::Tensor> chunks;
      for (auto i : c.groups) chunks.push_back(groups_[i]->chunk_of(groups_[i]->full(), groups_[i]->shard_rank()));
      c.input = torch::cat(chunks);
      c.output = torch::empty({c.input.numel() * world}, c.input.options());
    }
    c.work = layout_.shard->all_gather(c.output, c.input, /*async=*/true);
  }
  for (auto& c : calls) {
    c.work->wait();
    if (c.groups.size() == 1) continue;
    auto rows = c.output.view({world, c.input.numel()});
    std::int64_t offset = 0;
    for (auto i : c.groups) {
      auto& g = *groups_[i];
      g.full().view({world, g.chunk()}).copy_(rows.narrow(1, offset, g.chunk()));
      offset += g.chunk();
    }
  }
}

torch::Tensor ReplicaStrategy::evaluate(const Batch& batch) {
  model_->eval();
  torch::NoGradGuard no_grad;
  return Precision::output(model_->forward(precision_.compute(batch.inputs), BatchContext::of(batch)));
}

double ReplicaStrategy::parameter_norm() {
  const auto m = masters();
  const auto sum = layout_.shard != nullptr ? global_square_sum(m, *layout_.shard, SumPrecision::kExact)
                                            : square_sum(m, device_, SumPrecision::kExact);
  return std::sqrt(sum.item<double>());
}

ModelStateBytes ReplicaStrategy::memory() const {
  const auto [params, grads] = group_bytes(groups_);
  return {params, grads, optimizer_ ? optimizer_->state_bytes() : 0};
}

StateDict ReplicaStrategy::full_state_dict() {
  return gathered_state_dict(groups_, layout_.shard, *model_, rank_ == 0, aliases_);
}

std::vector<TensorPiece> ReplicaStrategy::state_pieces(StateAccess access, bool optimizer) {
  PieceOwner owner;
  owner.first = comm_->rank() == 0;
  const int shard = layout_.shard != nullptr ? layout_.shard->world_size() : 1;
  owner.replicas = comm_->world_size() / shard;
  owner.replica = comm_->rank() / shard;
  auto pieces = flat_state_pieces(groups_, optimizer ? optimizer_.get() : nullptr, access, owner);
  for (auto& p : frozen_state_pieces(*model_, access, owner)) pieces.push_back(std::move(p));
  return pieces;
}

void ReplicaStrategy::state_loaded() {
  masters_to_params();
  optimizer_->state_loaded();
}

std::vector<std::uint32_t> ReplicaStrategy::replica_digests() const {
  std::uint32_t crc = 0;
  for (const auto& g : groups_) crc = tensor_digest(g->full(), crc);
  for (const auto& b : model_->buffers()) crc = tensor_digest(b, crc);
  return {crc};
}

}  // namespace strata::inline kit_v1
