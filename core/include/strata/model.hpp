#pragma once
/// \file model.hpp
/// A model is an ordered list of *units* (each a module mapping Tensor -> Tensor) and a loss on
/// the last unit's output. Strategies that shard by unit (FSDP, ZeRO-3) gather a unit's parameters
/// just before it runs and free them after, so the unit is the granularity of memory and traffic.
///
/// Models must be deterministic functions of their parameters: no batch statistics and no
/// dropout by default, so that data-parallel strategies reproduce single-process training.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/types.h>

namespace strata {

/// One stage of a model. Implement `forward`; register parameters and submodules as usual.
class Unit : public torch::nn::Module {
 public:
  using torch::nn::Module::Module;
  /// Maps the previous unit's output (or the model input) to this unit's output.
  virtual torch::Tensor forward(const torch::Tensor& x) = 0;
};

/// Counts used for the evaluation metric (accuracy = correct / total).
struct MetricCounts {
  double correct = 0;  ///< number of correct predictions
  double total = 0;    ///< number of predictions
};

/// An ordered list of units plus a loss. The default loss is mean cross-entropy over class
/// logits, the default metric top-1 accuracy; models with other heads override both.
class Model : public torch::nn::Module {
 public:
  Model() : torch::nn::Module("Model") {}
  /// Appends a unit, registered as submodule `name` (so parameters() follows unit order).
  void add_unit(const std::string& name, std::shared_ptr<Unit> unit);
  /// Units in forward order.
  const std::vector<std::shared_ptr<Unit>>& units() const noexcept { return units_; }
  /// Names of the units, in the same order.
  const std::vector<std::string>& unit_names() const noexcept { return unit_names_; }

  /// Runs every unit in order.
  torch::Tensor forward(torch::Tensor x);
  /// Mean loss of a batch: `output` is the last unit's output, `target` the batch targets.
  virtual torch::Tensor loss(const torch::Tensor& output, const torch::Tensor& target) const;
  /// Evaluation counts of a batch (default: top-1 accuracy over the last dimension).
  virtual MetricCounts metric(const torch::Tensor& output, const torch::Tensor& target) const;

  /// Number of parameter elements.
  std::int64_t parameter_count() const;
  /// Training FLOPs per sample (forward + backward, about 3x forward); 0 when unknown.
  std::int64_t flops_per_sample() const noexcept { return flops_per_sample_; }
  void set_flops_per_sample(std::int64_t flops) noexcept { flops_per_sample_ = flops; }

 private:
  std::vector<std::shared_ptr<Unit>> units_;
  std::vector<std::string> unit_names_;
  std::int64_t flops_per_sample_ = 0;
};

/// What a model factory learns about the data it will see.
struct ModelContext {
  std::vector<std::int64_t> input_shape;  ///< shape of one sample, e.g. {1, 28, 28}
  std::int64_t num_classes = 0;           ///< number of target classes
};

}  // namespace strata
