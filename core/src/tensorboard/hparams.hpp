#pragma once
// What the HPARAMS tab shows of a run, and the run's summary figures as scalars. One list of names
// for the trainer (which writes them), `strata compare` (whose results.csv has the same columns and
// whose experiment summary lists them) and the tests.
//
// A run's session hyperparameters are a fixed core (core_hparams(): strategy, world_size, devices,
// model, ...) plus every key set on the command line (`--set section.key=value`, which is how
// `strata compare` sets its axes), named by hparam_name(). At its end the run writes its summary
// figures once as scalars "summary/<name>" (summary_figures()): the same names and definitions as
// results.csv's columns, and the metrics of the HPARAMS tab.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "strata/json.hpp"
#include "tensorboard/event_writer.hpp"

namespace strata {
struct Experiment;
}

namespace strata::tb {

/// The fixed hyperparameters of every run, in the order the HPARAMS tab should list them:
/// strategy and world_size first. world_size counts devices, as results.csv does (dp's replicas
/// in one process are its world size); ranks counts processes. Names, types and descriptions;
/// run_hparams() gives the values.
const std::vector<HParamInfo>& core_hparams();

/// A run's session hyperparameters (core_hparams() plus every key set with --set).
/// `ranks`: processes of the job; `devices`: devices computed on (ranks x devices per rank), which
/// is also the hparam `world_size` (the world size of results.csv: dp's replicas in one rank count);
/// `device`: the resolved device, e.g. "cpu" or "cuda:0".
std::map<std::string, HParamValue> run_hparams(const Experiment& e, int ranks, int devices,
                                               const std::string& device);

/// The hparam name of an experiment key: the core name where one covers it ("strategy.name" ->
/// "strategy", "optimizer.lr" -> "lr", "distributed.nproc" -> "ranks"), else the dotted key.
std::string hparam_name(const std::string& key);

/// A value in TOML syntax as an hparam value: integers and floats as numbers, true/false as
/// bools, strings without their quotes, anything else (an array) as its text.
HParamValue hparam_value(const std::string& toml_text);

/// One summary figure of a run: a column of results.csv and the scalar "summary/<name>".
struct SummaryFigure {
  const char* name;         ///< results.csv's column, e.g. "samples_per_s"
  const char* path;         ///< dotted path in summary.json; "" for model_state_bytes (a sum)
  const char* description;  ///< its definition, shown as the metric's tooltip
  bool scalar = true;       ///< written as a TensorBoard scalar (devices is an hparam instead)
};

/// The summary figures in results.csv's column order.
const std::vector<SummaryFigure>& summary_figures();

/// The figure's value in a summary.json; NaN when absent or null.
double figure_value(const Json& summary, const SummaryFigure& figure);

/// "summary/<name>": the TensorBoard tag of a figure.
std::string summary_tag(const SummaryFigure& figure);

/// The metrics of the HPARAMS tab: every scalar summary figure.
std::vector<MetricInfo> summary_metrics();

/// Writes every scalar figure of `summary` that has a finite value as "summary/<name>" at `step`.
void add_summary_scalars(EventWriter& writer, const Json& summary, std::int64_t step);

}  // namespace strata::tb
