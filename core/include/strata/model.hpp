#pragma once
/// \file model.hpp
/// A model is an ordered list of *units* (each a module mapping the hidden state to the next) and
/// a loss on the last unit's output. Strategies that shard by unit (FSDP, ZeRO-3) gather a unit's
/// parameters just before it runs and free them after, so the unit is the granularity of memory
/// and traffic. The hidden state is the one tensor that carries gradients from unit to unit; what
/// else a unit needs to see of the batch (attention mask, positions) arrives read-only in a
/// BatchContext.
///
/// Losses are *sums* over target elements: the trainer divides by the number of target elements
/// of the whole global batch (all micro-batches, all ranks), so a strategy equals `single` even
/// when micro-batches carry different numbers of tokens. Metrics are summable counts too, summed
/// over batches and ranks, then finalized once.
///
/// Models must be deterministic functions of their parameters: no batch statistics and no
/// dropout by default, so that data-parallel strategies reproduce single-process training.

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <torch/types.h>

#include "strata/dataset.hpp"

namespace strata {

/// Read-only facts about the batch that every unit may use; never carries gradients.
struct BatchContext {
  torch::Tensor mask;       ///< [n, T] bool, true = real token; undefined when the batch is unpadded
  torch::Tensor positions;  ///< [n, T] int64 position of each token (0 at the first real token); undefined when unpadded
  /// The context of `batch` (on the batch's device; computed there, no host sync).
  static BatchContext of(const Batch& batch);
};

/// One stage of a model. Implement `forward`; register parameters and submodules as usual.
class Unit : public torch::nn::Module {
 public:
  using torch::nn::Module::Module;
  /// Maps the previous unit's output (or the model input) to this unit's output.
  virtual torch::Tensor forward(const torch::Tensor& x, const BatchContext& context) = 0;
};

/// Summable evaluation counts by name: float64 scalars on the device, summed over batches and
/// ranks before Model::finalize_metrics turns them into metrics.
using MetricSums = std::vector<std::pair<std::string, torch::Tensor>>;
/// Finished metrics by name (e.g. accuracy, f1, perplexity).
using Metrics = std::vector<std::pair<std::string, double>>;

/// An ordered list of units plus a loss. The default loss is cross-entropy over class logits in
/// the last dimension (labels [n] or next tokens [n, T], kIgnoreIndex skipped), the default
/// metrics top-1 accuracy and, for two classes, F1 of class 1; models with other heads override.
class Model : public torch::nn::Module {
 public:
  Model() : torch::nn::Module("Model") {}
  /// Appends a unit, registered as submodule `name` (so parameters() follows unit order).
  void add_unit(const std::string& name, std::shared_ptr<Unit> unit);
  /// Units in forward order.
  const std::vector<std::shared_ptr<Unit>>& units() const noexcept { return units_; }
  /// Names of the units, in the same order.
  const std::vector<std::string>& unit_names() const noexcept { return unit_names_; }

  /// Runs every unit in order (run_unit).
  torch::Tensor forward(torch::Tensor x, const BatchContext& context = {});
  /// Runs unit `u` on `x`. When the unit is checkpointed and grad mode is on, its activations are
  /// not kept: only `x` is saved, and backward runs the unit's forward again (with grad) before
  /// going through it, so memory holds one unit's activations at a time instead of every
  /// checkpointed unit's. Gradients are the same, tensor by tensor (models are deterministic).
  /// Strategies that run the units themselves (zero3, fsdp) call this for each unit.
  torch::Tensor run_unit(std::size_t u, const torch::Tensor& x, const BatchContext& context);
  /// Activation checkpointing: every `every`-th unit (units 0, k, 2k, ...) is checkpointed; 1:
  /// every unit ("full"); 0: none (the default). Set by the host from [train] activation_checkpointing.
  void set_activation_checkpointing(int every) noexcept { checkpoint_every_ = every < 0 ? 0 : every; }
  int activation_checkpointing() const noexcept { return checkpoint_every_; }
  /// Whether unit `u` is checkpointed.
  bool checkpointed(std::size_t u) const noexcept {
    return checkpoint_every_ > 0 && u % static_cast<std::size_t>(checkpoint_every_) == 0;
  }
  /// Summed loss over the batch's target elements (kIgnoreIndex skipped): `output` is the last
  /// unit's output (float32). The trainer divides by Batch::target_count() summed globally.
  virtual torch::Tensor loss(const torch::Tensor& output, const Batch& batch) const;
  /// Summable evaluation counts of a batch (default: correct, total and, with two classes, tp, fp, fn).
  virtual MetricSums metric_sums(const torch::Tensor& output, const Batch& batch) const;
  /// Metrics from the global sums and the mean evaluation loss (default: accuracy and, when tp is
  /// present, f1).
  virtual Metrics finalize_metrics(const std::map<std::string, double>& sums, double mean_loss) const;

  /// The names of this model's tensors in an external checkpoint format (Hugging Face), as
  /// {strata name, external name} pairs; default none. `[train] init_from` accepts either name, and
  /// a safetensors `save_final` writes the external ones, so the external library loads the file.
  virtual std::vector<std::pair<std::string, std::string>> external_names() const { return {}; }
  /// The external format's config (e.g. a Hugging Face config.json), written beside a safetensors
  /// save_final; "" when none.
  virtual std::string external_config() const { return ""; }

  /// Number of parameter elements.
  std::int64_t parameter_count() const;
  /// Training FLOPs per sample (forward + backward, no recomputation: the "model FLOPs" of MFU),
  /// exact where the model knows them; 0 when unknown.
  std::int64_t flops_per_sample() const noexcept { return flops_per_sample_; }
  /// How flops_per_sample() is computed, in one line (printed beside achieved TFLOP/s and MFU).
  const std::string& flops_formula() const noexcept { return flops_formula_; }
  void set_flops_per_sample(std::int64_t flops, std::string formula = "") {
    flops_per_sample_ = flops;
    flops_formula_ = std::move(formula);
  }

 private:
  std::vector<std::shared_ptr<Unit>> units_;
  std::vector<std::string> unit_names_;
  std::int64_t flops_per_sample_ = 0;
  std::string flops_formula_;
  int checkpoint_every_ = 0;
};

/// Summable classification counts of logits [..., C] against targets [...] (kIgnoreIndex
/// skipped): correct and total, and tp, fp, fn of class 1 when C == 2.
MetricSums classification_sums(const torch::Tensor& logits, const torch::Tensor& targets);
/// accuracy = correct / total; f1 = 2tp / (2tp + fp + fn) when tp is present.
Metrics classification_metrics(const std::map<std::string, double>& sums);

/// Trainable parameters of `model` by name, each tensor once: a parameter registered under two
/// names (tied weights) keeps the first; `aliases` receives (second name, first name) pairs.
std::vector<std::pair<std::string, torch::Tensor>> unique_trainable_parameters(
    const Model& model, std::vector<std::pair<std::string, std::string>>* aliases = nullptr);

/// What a model factory learns about the data it will see.
struct ModelContext {
  DataSpec data;                     ///< shapes, vocabulary, classes
  std::filesystem::path config_dir;  ///< directory of the experiment file (resolve relative paths here)
};

}  // namespace strata
