#include <algorithm>

#include "strata/errors.hpp"
#include "strata/flat_params.hpp"

namespace strata::inline kit_v3 {

namespace {

std::vector<std::int64_t> shape_of(const torch::Tensor& t) { return t.sizes().vec(); }

/// The run [lo, hi) of group elements this rank covers: its chunk without the padding, and for
/// kSave only its replica's share of that.
std::pair<std::int64_t, std::int64_t> covered(const FlatGroup& g, StateAccess access, const PieceOwner& owner) {
  std::int64_t lo = g.shard_rank() * g.chunk();
  std::int64_t hi = std::min(lo + g.chunk(), g.numel());
  if (hi <= lo) return {0, 0};  // a chunk of padding only
  if (access == StateAccess::kSave && owner.replicas > 1) {
    const std::int64_t n = hi - lo, r = owner.replicas, q = owner.replica;
    const std::int64_t a = lo + n * q / r, b = lo + n * (q + 1) / r;
    lo = a, hi = b;
  }
  return {lo, hi};
}

}  // namespace

std::vector<TensorPiece> flat_state_pieces(const FlatGroups& groups, Optimizer* optimizer, StateAccess access,
                                           const PieceOwner& owner) {
  OptimizerState state;
  if (optimizer != nullptr) {
    if (access == StateAccess::kLoad) optimizer->init_state();
    state = optimizer->state();
  }
  std::vector<TensorPiece> pieces;
  bool step_written = false;
  for (const auto& group : groups) {
    const FlatGroup& g = *group;
    // The optimizer's index of this group's master (its parameters are the masters, in some order).
    std::size_t slot = 0;
    if (optimizer != nullptr) {
      const auto& params = optimizer->params();
      while (slot < params.size() && !params[slot].is_same(g.master())) ++slot;
      if (slot == params.size()) throw Error("flat_state_pieces: the optimizer does not step this group's master");
    }
    const auto [lo, hi] = covered(g, access, owner);
    const std::int64_t chunk_start = g.shard_rank() * g.chunk();
    std::int64_t offset = 0;  // of parameter k in the group
    for (std::size_t k = 0; k < g.size(); ++k) {
      const auto& param = g.param(k);
      const std::int64_t n = param.numel();
      const std::int64_t a = std::max(lo, offset), b = std::min(hi, offset + n);
      if (a < b) {
        const auto add = [&](const std::string& name, const torch::Tensor& flat_chunk) {
          pieces.push_back({name, shape_of(param), a - offset, b - offset, flat_chunk.narrow(0, a - chunk_start, b - a)});
        };
        add("model/" + g.name(k), g.master());
        for (const auto& [kind, tensors] : state)
          if (kind != "step") add("optim/" + kind + "/" + g.name(k), tensors.at(slot));
      }
      offset += n;
    }
    for (const auto& [kind, tensors] : state) {
      if (kind != "step") continue;
      if (access == StateAccess::kLoad)
        pieces.push_back({"optim/step", {}, 0, 1, tensors.at(slot).view({1})});
      else if (owner.first && !step_written)
        pieces.push_back({"optim/step", {}, 0, 1, tensors.at(slot).detach().reshape({1})});
      step_written = true;
    }
  }
  return pieces;
}

}  // namespace strata::inline kit_v3
