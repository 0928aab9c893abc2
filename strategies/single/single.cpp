// `single`: the baseline every other strategy is compared with and must reproduce. One process,
// one device, a plain optimizer step; no communication.

#include <strata/plugin.hpp>
#include <strata/replica.hpp>

namespace {

/// `single` has no options; the struct exists so `strata describe single` and validation work
/// like for every other plugin.
struct SingleOptions {};

class SingleStrategy final : public strata::ReplicaStrategy {
 public:
  void setup(const strata::StrategySetup& s) override { take_over(s); }

  torch::Tensor forward_backward(const strata::Batch& batch, strata::MicroStep micro) override {
    return replica_forward_backward(batch, micro);
  }

  double finish_gradients(double max_norm) override { return clip_replica_gradients(max_norm); }

  void step(double lr) override { replica_step(lr); }
};

void register_single(strata::Registry& registry) {
  registry.add_strategy("single", "one process, one device: the baseline (no communication)",
                        strata::Schema<SingleOptions>{},
                        [](const SingleOptions&) { return std::make_shared<SingleStrategy>(); },
                        strata::Placement::one_device());
}

}  // namespace

STRATA_PLUGIN(strategy, "single", "0.1.0", register_single)
