#include "train/evaluation.hpp"

#include <algorithm>
#include <map>
#include <vector>

#include <fmt/format.h>
#include <torch/utils.h>

#include "data/sampler.hpp"
#include "train/tensor_memory.hpp"

namespace strata {

std::string EvalResult::describe() const {
  std::string s = fmt::format("loss {:.4f}", loss);
  for (const auto& [key, value] : metrics) s += fmt::format("  {} {:.4f}", key, value);
  return s;
}

EvalResult evaluate(Strategy& strategy, Dataset& dataset, Comm& comm, const torch::Device& device,
                    const EvalOptions& options) {
  comm.set_phase(CommPhase::kEval);
  const std::int64_t n = dataset.size(Split::kEval);
  // An eval batch larger than the split is the split (and (n + batch - 1) cannot overflow).
  const std::int64_t batch = std::max<std::int64_t>(1, std::min(options.batch_size, n));
  const std::int64_t batches = options.batches > 0 ? std::min(options.batches, (n + batch - 1) / batch)
                                                   : (n + batch - 1) / batch;
  // Sums on the device: loss, counted targets, examples, then the model's metric sums by name.
  // Each rank takes its slice of every batch; a rank whose slice is empty evaluates one example
  // with weight 0, so that every rank runs the same forwards (sharded strategies gather in them).
  std::vector<std::string> names{"loss", "targets", "examples"};
  std::vector<torch::Tensor> sums;
  const Model& model = strategy.model();
  for (std::int64_t b = 0; b < batches; ++b) {
    const std::int64_t start = b * batch, count = std::min(batch, n - start);
    auto [lo, hi] = rank_slice(count, comm.world_size(), comm.rank());
    const double weight = hi > lo ? 1.0 : 0.0;
    if (hi <= lo) lo = 0, hi = 1;
    Batch data;
    {
      tensor_memory::Untracked host_data;
      data = dataset.get(Split::kEval, torch::arange(start + lo, start + hi, torch::kInt64));
    }
    data = data.to(device, /*non_blocking=*/true);
    torch::NoGradGuard no_grad;
    const torch::Tensor output = strategy.evaluate(data);
    const auto f64 = torch::TensorOptions().dtype(torch::kFloat64).device(output.device());
    std::vector<torch::Tensor> values{model.loss(output, data).to(torch::kFloat64), data.target_count(),
                                      torch::full({}, static_cast<double>(hi - lo), f64)};
    for (auto& [name, value] : model.metric_sums(output, data)) {
      if (sums.empty()) names.push_back(name);
      values.push_back(value.reshape({}).to(torch::kFloat64));
    }
    auto row = torch::stack(values).to(comm.device()) * weight;
    sums.push_back(row);
  }
  auto totals = torch::stack(sums).sum(0);
  if (comm.world_size() > 1) comm.all_reduce(totals, ReduceOp::kSum);
  comm.set_phase(CommPhase::kTrain);
  totals = totals.to(torch::kCPU);
  std::map<std::string, double> by_name;
  for (std::size_t i = 0; i < names.size(); ++i) by_name[names[i]] = totals[static_cast<std::int64_t>(i)].item<double>();
  EvalResult r;
  r.examples = static_cast<std::int64_t>(by_name["examples"]);
  r.loss = by_name["loss"] / std::max(1.0, by_name["targets"]);  // mean over counted target elements
  r.metrics = model.finalize_metrics(by_name, r.loss);
  return r;
}

}  // namespace strata
