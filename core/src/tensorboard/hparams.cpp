#include "tensorboard/hparams.hpp"

#include <cmath>

#include <toml++/toml.h>

#include "config/experiment.hpp"

namespace strata::tb {

const std::vector<HParamInfo>& core_hparams() {
  using T = HParamType;
  static const std::vector<HParamInfo> infos{
      {"strategy", T::kString, false, "strategy.name"},
      {"world_size", T::kFloat64, false,
       "world size as results.csv counts it: devices computed on (ranks, or dp's replicas in one process)"},
      {"devices", T::kFloat64, false, "devices computed on: ranks x devices per rank (dp's replicas)"},
      {"ranks", T::kFloat64, false, "processes of the job (dp: 1, its replicas share it)"},
      {"model", T::kString, false, "model.name"},
      {"dataset", T::kString, false, "dataset.name"},
      {"optimizer", T::kString, false, "optimizer.name"},
      {"lr", T::kFloat64, false, "optimizer.lr (peak learning rate)"},
      {"global_batch_size", T::kFloat64, false, "train.global_batch_size (samples per step, all ranks)"},
      {"micro_batches", T::kFloat64, false, "train.micro_batches (gradient accumulation)"},
      {"seed", T::kFloat64, false, "train.seed"},
      {"device", T::kString, false, "the device a rank computes on"},
  };
  return infos;
}

std::string hparam_name(const std::string& key) {
  static const std::map<std::string, std::string> names{
      {"strategy.name", "strategy"},         {"model.name", "model"},
      {"dataset.name", "dataset"},           {"optimizer.name", "optimizer"},
      {"optimizer.lr", "lr"},                {"train.global_batch_size", "global_batch_size"},
      {"train.micro_batches", "micro_batches"}, {"train.seed", "seed"},
      {"train.device", "device"},            {"distributed.nproc", "ranks"},
  };
  const auto it = names.find(key);
  return it == names.end() ? key : it->second;
}

HParamValue hparam_value(const std::string& toml_text) {
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + toml_text);
  } catch (const toml::parse_error&) {
    return toml_text;
  }
  const toml::node* v = parsed.get("v");
  if (const auto* i = v->as_integer()) return static_cast<double>(i->get());
  if (const auto* f = v->as_floating_point()) return f->get();
  if (const auto* b = v->as_boolean()) return b->get();
  if (const auto* s = v->as_string()) return s->get();
  return toml_text;
}

std::map<std::string, HParamValue> run_hparams(const Experiment& e, int ranks, int devices,
                                               const std::string& device) {
  const auto& t = e.train;
  // world_size is the comparison's world size, the devices: dp's replicas share one rank, and a
  // world_size of its ranks (1) would list `dp-w2` as world size 1 beside results.csv's 2.
  std::map<std::string, HParamValue> hparams{
      {"strategy", e.strategy.name},
      {"world_size", static_cast<double>(devices)},
      {"devices", static_cast<double>(devices)},
      {"ranks", static_cast<double>(ranks)},
      {"model", e.model.name},
      {"dataset", e.dataset.name},
      {"optimizer", e.optimizer.name},
      {"lr", e.optimizer.lr},
      {"global_batch_size", static_cast<double>(t.global_batch_size)},
      {"micro_batches", static_cast<double>(t.micro_batches)},
      {"seed", static_cast<double>(t.seed)},
      {"device", device},
  };
  // Keys set on the command line: how `strata compare` sets its axes, and how a user varies a
  // few runs by hand. Their origin is "--set KEY=VALUE" (Experiment::location).
  for (const auto& [key, text] : resolved_values(e))
    if (e.location(key).file.rfind("--set ", 0) == 0) hparams.try_emplace(hparam_name(key), hparam_value(text));
  return hparams;
}

const std::vector<SummaryFigure>& summary_figures() {
  static const std::vector<SummaryFigure> figures{
      {"train_time_s", "train_time_s", "training time in seconds: the sum of the steps' times (setup and evaluation apart)"},
      {"step_time_s", "step_time_s", "median time of a training step, in seconds"},
      {"samples_per_s", "samples_per_s", "mean throughput: samples of every step / train_time_s"},
      {"model_state_bytes", "", "parameters + gradients + optimizer state held per rank between steps (max over ranks)"},
      {"peak_bytes", "memory.peak_bytes", "peak memory per rank (process resident set on CPU, CUDA reserved bytes)"},
      {"peak_tensor_bytes", "memory.peak_tensor_bytes", "most live tensor bytes per rank during training steps"},
      {"bus_bytes_per_step", "comm.bus_bytes_per_step", "bus bytes per training step per rank (nccl-tests' definition)"},
      {"final_loss", "final_loss", "training loss of the last step"},
      {"eval_accuracy", "eval.accuracy", "accuracy of the final evaluation"},
      {"devices", "devices", "devices computed on", false},
      {"params_bytes", "memory.model_state_bytes.params", "parameter bytes per rank"},
      {"grads_bytes", "memory.model_state_bytes.grads", "gradient bytes per rank"},
      {"optimizer_bytes", "memory.model_state_bytes.optimizer", "optimizer state bytes per rank"},
      {"payload_bytes_per_step", "comm.payload_bytes_per_step", "bytes handed to collectives per training step per rank"},
      {"calls_per_step", "comm.calls_per_step", "collective calls per training step"},
      {"comm_time_s", "comm.time_s", "time spent in collectives during training, in seconds"},
      {"eval_loss", "eval.loss", "loss of the final evaluation"},
      {"param_norm", "param_norm", "global L2 norm of all parameters at the end"},
  };
  return figures;
}

double figure_value(const Json& summary, const SummaryFigure& figure) {
  const auto at = [&](const char* path) {
    const Json* v = summary.at_path(path);
    return v ? v->number_or(NAN) : NAN;
  };
  if (figure.path[0] != '\0') return at(figure.path);
  return at("memory.model_state_bytes.params") + at("memory.model_state_bytes.grads") +
         at("memory.model_state_bytes.optimizer");
}

std::string summary_tag(const SummaryFigure& figure) { return std::string("summary/") + figure.name; }

std::vector<MetricInfo> summary_metrics() {
  std::vector<MetricInfo> metrics;
  for (const auto& f : summary_figures())
    if (f.scalar) metrics.push_back({summary_tag(f), f.description});
  return metrics;
}

void add_summary_scalars(EventWriter& writer, const Json& summary, std::int64_t step) {
  for (const auto& f : summary_figures())
    if (const double v = figure_value(summary, f); f.scalar && std::isfinite(v)) writer.add_scalar(summary_tag(f), v, step);
  writer.flush();
}

}  // namespace strata::tb
