#include "strata/grad_reducer.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/utils.h>

#include "strata/errors.hpp"

namespace strata::inline kit_v3 {

/// One collective over one or more consecutive groups.
struct GradReducer::Reduction {
  std::vector<std::size_t> groups;
  torch::Tensor input;   // what travels (the kFull buffer itself when no cast is needed)
  torch::Tensor output;  // where the result lands (may be input)
  std::shared_ptr<CommWork> work;
  std::int64_t width = 0;  // coded: this rank's columns (elements)
  bool across = false;     // coded over two levels: the exchange across the sub-groups is in flight
};

namespace {
int size_of(const Comm* comm) { return comm == nullptr ? 1 : comm->world_size(); }
/// Whether collectives over `comm` must be issued (null: no group).
bool issues(const Comm* comm) { return comm != nullptr && !comm->skips_collectives(); }
}  // namespace

GradReducer::GradReducer(std::vector<FlatGroup*> groups, const Precision& precision, GradReducerOptions options)
    : groups_(std::move(groups)), precision_(precision), options_(std::move(options)) {
  if (groups_.empty()) return;
  holding_ = groups_.front()->options().grads;
  const int n = size_of(options_.shard);
  for (const auto* g : groups_)
    if (g->options().grads != holding_ || g->shard_size() != n)
      throw Error(options_.owner + ": gradient reducer over groups of mixed kinds (shard size " +
                  std::to_string(g->shard_size()) + " against the shard group's " + std::to_string(n) + ")");
  if (holding_ == GradHolding::kFull && n > 1 && size_of(options_.replicate) > 1)
    throw Error(options_.owner + ": full gradient buffers are reduced over one group (shard or replicate), not both");
  if (options_.max_in_flight < 1) options_.max_in_flight = 1;

  std::vector<std::vector<std::size_t>> buckets;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    buckets.emplace_back();
    first_param_.push_back(param_names_.size());
    for (std::size_t k = 0; k < groups_[g]->size(); ++k) {
      buckets.back().push_back(param_names_.size());
      param_names_.push_back(groups_[g]->name(k));
    }
  }
  schedule_ = BucketSchedule(buckets, param_names_.size(), [this](std::size_t g) { launch(g); });
  arrived_.assign(groups_.size(), 0);
  staged_.resize(groups_.size());
  param_arrived_.assign(param_names_.size(), false);
}

void GradReducer::gradient_arrived(std::size_t group, std::size_t index) {
  grad_ready(group, index, first_param_.at(group) + index);
}

GradReducer::~GradReducer() {
  // The engine removes its grad-ready hooks before it destroys its reducer.
  // Pending collectives hold buffers of this object: complete them (errors were reported before).
  for (auto& r : pending_)
    try {
      if (r->work) r->work->wait();
    } catch (...) {
    }
  for (auto& a : averages_)
    try {
      a.work->wait();
    } catch (...) {
    }
}

bool GradReducer::coded() const { return options_.codec && issues(options_.shard); }

bool GradReducer::communicates(MicroStep micro) const {
  if (holding_ == GradHolding::kShard) return true;
  // A synchronizing strategy checks its rounds (missing gradients) at every world size, one included.
  return micro.last() && (options_.shard != nullptr || options_.replicate != nullptr);
}

void GradReducer::begin_backward(MicroStep micro) {
  std::fill(arrived_.begin(), arrived_.end(), 0);
  std::fill(param_arrived_.begin(), param_arrived_.end(), false);
  round_open_ = communicates(micro) && options_.overlap;
  if (round_open_) schedule_.start_round();
  average_now_ = micro.last() && holding_ == GradHolding::kShard && issues(options_.replicate);
}

void GradReducer::grad_ready(std::size_t g, std::size_t k, std::size_t i) {
  groups_[g]->accumulate(k);
  if (param_arrived_[i]) return;
  param_arrived_[i] = true;
  if (++arrived_[g] == groups_[g]->size() && options_.on_group_complete) options_.on_group_complete(g);
  if (round_open_) schedule_.mark_ready(i);
}

void GradReducer::launch(std::size_t g) {
  if (holding_ == GradHolding::kShard) {
    // Staged now, so that autograd's gradients go at once, whether or not the group waits for
    // others to be reduced with.
    staged_[g] = groups_[g]->take_grads(precision_.reduce_dtype());
    ready_.push_back(g);
    flush(false);
    return;
  }
  torch::NoGradGuard no_grad;
  auto& group = *groups_[g];
  auto r = std::make_unique<Reduction>();
  r->groups = {g};
  r->input = precision_.wire(group.full_grad());
  if (options_.shard != nullptr) {
    // In place: the chunk this rank keeps is the result; the rest of the buffer is zeroed with
    // the gradients after the step (only the last micro-batch of a step communicates).
    r->output = group.chunk_of(r->input, group.shard_rank());
    r->work = options_.shard->reduce_scatter(r->output, r->input, ReduceOp::kAvg, /*async=*/true);
  } else {
    r->output = r->input;
    r->work = options_.replicate->all_reduce(r->output, ReduceOp::kAvg, /*async=*/true);
  }
  while (static_cast<int>(pending_.size()) >= options_.max_in_flight) complete_oldest();
  pending_.push_back(std::move(r));
}

void GradReducer::flush(bool all) {
  const int n = size_of(options_.shard);
  while (!ready_.empty()) {
    // Consecutive ready groups up to the coalescing cap (at least one).
    std::size_t take = 0;
    std::int64_t bytes = 0;
    while (take < ready_.size()) {
      const auto b = static_cast<std::int64_t>(staged_[ready_[take]].nbytes());
      if (take > 0 && bytes + b > options_.coalesce_bytes) break;
      bytes += b;
      ++take;
    }
    if (!all && take == ready_.size() && bytes < options_.coalesce_bytes) return;  // wait for more
    torch::NoGradGuard no_grad;
    auto r = std::make_unique<Reduction>();
    r->groups.assign(ready_.begin(), ready_.begin() + static_cast<std::ptrdiff_t>(take));
    ready_.erase(ready_.begin(), ready_.begin() + static_cast<std::ptrdiff_t>(take));
    std::vector<torch::Tensor> columns;  // rank-major: [N, chunk] per group, side by side
    std::int64_t width = 0;
    for (auto g : r->groups) {
      columns.push_back(staged_[g].view({n, groups_[g]->chunk()}));
      staged_[g] = torch::Tensor();
      width += groups_[g]->chunk();
    }
    r->input = columns.size() == 1 ? columns.front().reshape({-1}) : torch::cat(columns, 1).reshape({-1});
    columns.clear();
    if (!issues(options_.shard)) {
      r->output = r->input;
    } else if (coded()) {
      launch_coded(*r, width);
    } else {
      // In place: this rank's columns are the result; the staging buffer is the collective's own.
      r->output = r->input.narrow(0, static_cast<std::int64_t>(options_.shard->rank()) * width, width);
      r->work = options_.shard->reduce_scatter(r->output, r->input, ReduceOp::kAvg, /*async=*/true);
    }
    while (static_cast<int>(pending_.size()) >= options_.max_in_flight) complete_oldest();
    pending_.push_back(std::move(r));
  }
}

void GradReducer::complete_oldest() {
  auto r = std::move(pending_.front());
  pending_.erase(pending_.begin());
  if (r->work) r->work->wait();
  torch::NoGradGuard no_grad;
  if (coded() && !finish_coded(*r)) {
    // Its exchange across the sub-groups is issued: in flight again, behind the others, so that it
    // overlaps what backward computes next rather than holding the compute stream.
    pending_.push_back(std::move(r));
    return;
  }
  if (holding_ == GradHolding::kShard) {
    std::int64_t offset = 0;
    for (auto g : r->groups) {
      auto& group = *groups_[g];
      group.master().grad().add_(r->output.narrow(0, offset, group.chunk()));
      offset += group.chunk();
    }
    // The step's shard of these groups is complete: averaged over the replicas now, overlapping
    // the rest of backward, rather than all of them after it.
    if (average_now_)
      for (auto g : r->groups) average_shard(g);
    return;
  }
  auto& group = *groups_[r->groups.front()];
  if (options_.shard != nullptr) {
    auto mine = group.chunk_of(group.full_grad(), group.shard_rank());
    if (!r->output.is_alias_of(mine) || r->output.data_ptr() != mine.data_ptr()) mine.copy_(r->output);
  } else if (!r->output.is_same(group.full_grad()))
    group.full_grad().copy_(r->output);
}  // the buffers of `r` are released here

void GradReducer::launch_coded(Reduction& r, std::int64_t width) {
  // r.input: [n, width], row d the columns rank d owns. Over two levels (n = k x m, rank d = g k + j
  // the j-th member of sub-group g) the rows for every rank at position j travel to the sub-group's
  // member j first: rows ordered by j, m to a peer.
  const int n = size_of(options_.shard);
  auto rows = r.input.view({n, width});
  Comm* lane = options_.shard;
  if (options_.codec_inner != nullptr) {
    const int k = options_.codec_inner->world_size();
    rows = rows.view({n / k, k, width}).transpose(0, 1).reshape({n, width});
    lane = options_.codec_inner;
  }
  r.input = options_.codec->encode(rows);  // the staged gradients are released here
  r.output = torch::empty_like(r.input);
  r.work = lane->all_to_all(r.output, r.input, /*async=*/true);
  r.width = width;
}

bool GradReducer::finish_coded(Reduction& r) {
  const int n = size_of(options_.shard);
  auto& codec = *options_.codec;
  if (options_.codec_inner != nullptr && !r.across) {
    // From each of the k members of this sub-group: the m rows for the ranks at this position,
    // summed, encoded again and exchanged across the sub-groups (one row to each).
    const int k = options_.codec_inner->world_size(), m = n / k;
    auto partial = codec.decode(r.output.view({n, -1}), r.width).view({k, m, r.width}).sum(0);
    r.input = codec.encode(partial);
    r.output = torch::empty_like(r.input);
    r.across = true;
    if (!options_.codec_outer->skips_collectives()) {
      r.work = options_.codec_outer->all_to_all(r.output, r.input, /*async=*/true);
      return false;
    }
    r.output.copy_(r.input);
  }
  const std::int64_t rows = r.across ? n / options_.codec_inner->world_size() : n;
  auto sum = codec.decode(r.output.view({rows, -1}), r.width).sum(0);
  r.input = torch::Tensor();
  r.output = sum.div_(static_cast<double>(n));  // the average, as the reduce-scatter's kAvg
  r.work.reset();
  return true;
}

void GradReducer::complete_all() {
  while (!pending_.empty()) complete_oldest();
}

void GradReducer::end_backward(MicroStep micro) {
  if (!communicates(micro)) return;
  if (!options_.overlap) {
    schedule_.start_round();
    round_open_ = true;
    for (std::size_t i = 0; i < param_arrived_.size(); ++i)
      if (param_arrived_[i]) schedule_.mark_ready(i);
  }
  if (!schedule_.all_launched()) {
    if (!options_.allow_missing) {
      std::vector<std::string> missing;
      for (auto i : schedule_.missing()) missing.push_back(param_names_[i]);
      average_now_ = false;  // no new collective on the way out
      complete_all();  // collectives already launched must complete on every rank before failing
      complete_averages();
      schedule_.end_round();
      round_open_ = false;
      ready_.clear();
      for (auto& t : staged_) t = torch::Tensor();
      for (auto* g : groups_)
        for (std::size_t k = 0; k < g->size(); ++k) g->param(k).mutable_grad() = torch::Tensor();
      throw Error(options_.owner + ": " + std::to_string(missing.size()) +
                      " parameter(s) received no gradient in this step: " + fmt::format("{}", fmt::join(missing, ", ")) + ".",
                  options_.missing_fix);
    }
    schedule_.launch_rest();  // the missing gradients count as zeros
  }
  flush(/*all=*/true);
  complete_all();
  schedule_.end_round();
  round_open_ = false;
  average_now_ = false;
  complete_averages();
}

void GradReducer::average_shard(std::size_t group) {
  torch::NoGradGuard no_grad;
  Average a{group, precision_.wire(groups_[group]->master().grad()), nullptr};
  a.work = options_.replicate->all_reduce(a.wire, ReduceOp::kAvg, /*async=*/true);
  averages_.push_back(std::move(a));
}

void GradReducer::complete_averages() {
  torch::NoGradGuard no_grad;
  for (auto& a : averages_) {
    a.work->wait();
    auto& grad = groups_[a.group]->master().grad();
    if (!a.wire.is_same(grad)) grad.copy_(a.wire);
  }
  averages_.clear();
}

std::int64_t GradReducer::in_flight_bytes() const {
  std::vector<torch::Tensor> buffers = staged_;
  for (const auto& a : averages_)  // casts for the wire; the shard itself is not a buffer
    if (!a.wire.is_same(groups_[a.group]->master().grad())) buffers.push_back(a.wire);
  for (const auto& r : pending_) {
    buffers.push_back(r->input);
    buffers.push_back(r->output);
  }
  return storage_bytes(buffers);
}

}  // namespace strata::inline kit_v3
