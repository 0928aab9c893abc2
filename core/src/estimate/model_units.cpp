// The model's units, their parameter counts and, measured on one device, each unit's forward and
// backward time and the activation bytes it holds between them (needs LibTorch: builds the model).

#include <algorithm>
#include <chrono>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <torch/autograd.h>

#include "config/experiment.hpp"
#include "comm/stream_waits.hpp"
#include "estimate/profile.hpp"
#include "run.hpp"
#include "strata/dataset.hpp"
#include "strata/model.hpp"
#include "strata/precision.hpp"
#include "strata/registry.hpp"
#include "train/median.hpp"
#include "train/tensor_memory.hpp"

namespace strata::estimate {

namespace {

/// Elapsed seconds of a piece of work on `device`: a host clock on the CPU (where work is
/// synchronous), CUDA events on a GPU, read when the pass is done.
class Stopwatch {
 public:
  explicit Stopwatch(torch::Device device) : device_(device) {}
  void start() {
    if (device_.is_cuda()) {
      started_event_.emplace(record_timing_event(device_));
    } else {
      started_ = std::chrono::steady_clock::now();
    }
  }
  /// Ends the piece begun by start(); its seconds are added to `*into` by settle().
  void stop(double* into) {
    if (device_.is_cuda()) {
      pending_.push_back({std::move(*started_event_), record_timing_event(device_), into});
      started_event_.reset();
    } else {
      *into += std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
    }
  }
  void settle() {
    for (auto& p : pending_) {
      p.end.synchronize();
      *p.into += p.start.elapsedTime(p.end) / 1000.0;
    }
    pending_.clear();
  }

 private:
  struct Pending {
    c10::Event start, end;
    double* into;
  };
  torch::Device device_;
  std::chrono::steady_clock::time_point started_{};
  std::optional<c10::Event> started_event_;
  std::vector<Pending> pending_;
};

struct Pass {
  std::vector<double> forward, backward, held;
};

/// One forward and backward of `batch`, unit by unit: each unit's input is cut from the graph, so
/// that backward can be run (and timed) one unit at a time; the loss's backward counts in the last
/// unit's. `held`: live tensor bytes after the unit's forward less before it.
Pass one_pass(Model& model, const Batch& batch, const BatchContext& context, torch::Device device) {
  const std::size_t n = model.units().size();
  Pass pass{std::vector<double>(n, 0.0), std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};
  Stopwatch watch(device);
  std::vector<torch::Tensor> inputs, outputs;
  torch::Tensor x = batch.inputs;
  for (std::size_t u = 0; u < n; ++u) {
    torch::Tensor in = u > 0 && x.is_floating_point() ? x.detach().requires_grad_(true) : x;
    const auto before = tensor_memory::live_bytes(device);  // the allocator counts on the host: no sync
    watch.start();
    torch::Tensor out = model.run_unit(u, in, context);
    watch.stop(&pass.forward[u]);
    pass.held[u] = static_cast<double>(tensor_memory::live_bytes(device) - before);
    inputs.push_back(in);
    outputs.push_back(out);
    x = out;
  }
  for (std::size_t u = n; u-- > 0;) {
    watch.start();
    if (u + 1 == n) {
      const auto loss = model.loss(outputs[u].to(torch::kFloat32), batch) / batch.target_count();
      loss.backward();
    } else if (inputs[u + 1].requires_grad() && inputs[u + 1].grad().defined()) {
      torch::autograd::backward({outputs[u]}, {inputs[u + 1].grad()});
    }
    watch.stop(&pass.backward[u]);
  }
  watch.settle();
  model.zero_grad(/*set_to_none=*/true);
  return pass;
}

}  // namespace

std::vector<UnitProfile> model_units(const Experiment& experiment, const UnitTiming* timing) {
  std::vector<UnitProfile> units;
  Experiment e = experiment;
  Registry registry;
  load_registry(registry, &e);
  validate_plugin_sections(e, registry);
  const DatasetContext dataset_context{std::filesystem::absolute(e.directory()).lexically_normal(),
                                       static_cast<std::uint64_t>(e.train.seed)};
  const auto dataset = registry.create_dataset(e.dataset.name, e.dataset.options, dataset_context);
  if (timing != nullptr) tensor_memory::install();  // before the model exists, as `strata run` does
  const ModelContext model_context{dataset->spec(), e.directory()};
  const auto model = registry.create_model(e.model.name, e.model.options, model_context);
  const auto& names = model->unit_names();
  // A tied parameter counts in the first unit, where strategies place it; a later unit reading it
  // reads from that one.
  std::unordered_map<const void*, std::size_t> holder;
  for (std::size_t u = 0; u < model->units().size(); ++u) {
    UnitProfile unit;
    unit.name = u < names.size() ? names[u] : fmt::format("unit{}", u);
    for (const auto& t : model->units()[u]->parameters()) {
      if (!t.requires_grad()) continue;
      const auto [it, fresh] = holder.try_emplace(t.unsafeGetTensorImpl(), u);
      if (fresh) {
        unit.params += static_cast<double>(t.numel());
        unit.tensors.push_back(t.sizes().vec());
      } else if (it->second != u &&
                 std::find(unit.reads_from.begin(), unit.reads_from.end(), it->second) == unit.reads_from.end()) {
        unit.reads_from.push_back(it->second);
      }
    }
    units.push_back(std::move(unit));
  }
  if (timing == nullptr || timing->repeats <= 0) return units;

  // One micro-batch of the profile's, on its device, in its parameter dtype and thread count.
  const torch::Device device(timing->device);
  const int threads_before = at::get_num_threads();
  if (!device.is_cuda() && timing->threads > 0) at::set_num_threads(timing->threads);
  model->to(device);
  const auto dtype = dtype_from_name(e.precision.param_dtype);
  if (dtype != torch::kFloat32) model->to(dtype);
  model->train();
  const std::int64_t micro = std::max<std::int64_t>(1, e.train.global_batch_size / std::max<std::int64_t>(1, e.train.micro_batches));
  const std::int64_t size = std::min(micro, dataset->size(Split::kTrain));
  Batch batch;
  {
    tensor_memory::Untracked host_side;
    batch = dataset->get(Split::kTrain, torch::arange(size, torch::kLong));
  }
  batch = batch.to(device);
  if (batch.inputs.is_floating_point() && dtype != torch::kFloat32) batch.inputs = batch.inputs.to(dtype);
  const BatchContext context = BatchContext::of(batch);

  for (const bool checkpointed : {false, true}) {
    model->set_activation_checkpointing(checkpointed ? 1 : 0);
    one_pass(*model, batch, context, device);  // warm-up: allocations, kernels chosen
    std::vector<Pass> passes;
    for (int r = 0; r < timing->repeats; ++r) passes.push_back(one_pass(*model, batch, context, device));
    for (std::size_t u = 0; u < units.size(); ++u) {
      std::vector<double> f, b, h;
      for (const auto& p : passes) f.push_back(p.forward[u]), b.push_back(p.backward[u]), h.push_back(p.held[u]);
      auto& unit = units[u];
      if (checkpointed) {
        unit.checkpointed_bytes = median(h) * static_cast<double>(micro) / static_cast<double>(size);
        unit.checkpointed_backward_s = median(b);
      } else {
        unit.forward_s = median(f);
        unit.backward_s = median(b);
        unit.activation_bytes = median(h) * static_cast<double>(micro) / static_cast<double>(size);
      }
    }
  }
  model->set_activation_checkpointing(0);
  if (!device.is_cuda()) at::set_num_threads(threads_before);
  return units;
}

}  // namespace strata::estimate
