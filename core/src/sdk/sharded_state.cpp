#include "strata/sharded_state.hpp"

#include "strata/errors.hpp"
#include "strata/strategy.hpp"

namespace strata {

ShardedState::~ShardedState() = default;

namespace {

std::vector<std::int64_t> shape_of(const torch::Tensor& t) { return t.sizes().vec(); }

}  // namespace

std::vector<TensorPiece> frozen_state_pieces(const Model& model, StateAccess access, const PieceOwner& owner) {
  std::vector<TensorPiece> pieces;
  if (access == StateAccess::kSave && !owner.first) return pieces;
  const auto add = [&](const std::string& name, const torch::Tensor& t) {
    if (access == StateAccess::kSave) {
      pieces.push_back({"model/" + name, shape_of(t), 0, t.numel(), state_dict_copy(t).reshape({-1})});
      return;
    }
    if (!t.is_contiguous())
      throw Error("the model's tensor '" + name + "' is not contiguous, so a checkpoint cannot be loaded into it",
                  "Register buffers and frozen parameters as contiguous tensors.");
    pieces.push_back({"model/" + name, shape_of(t), 0, t.numel(), t.detach().view({-1})});
  };
  for (const auto& p : model.named_parameters())
    if (!p.value().requires_grad()) add(p.key(), p.value());
  for (const auto& b : model.named_buffers()) add(b.key(), b.value());
  return pieces;
}

}  // namespace strata
