#pragma once
// The schemas of the experiment file's core sections ([experiment], [optimizer], [train], [eval],
// [log], [distributed], [precision], [checkpoint], [plugins]): each key with its field, default,
// description and constraint, read by load_experiment and shown by `strata describe`.

#include "config/experiment.hpp"

namespace strata::detail {

const Schema<ExperimentSection>& experiment_schema();
const Schema<OptimizerSpec>& optimizer_schema();
const Schema<TrainSection>& train_schema();
const Schema<EvalSection>& eval_schema();
const Schema<LogSection>& log_schema();
const Schema<DistributedSection>& distributed_schema();
const Schema<CheckpointSection>& checkpoint_schema();
const Schema<PrecisionSection>& precision_schema();
const Schema<PluginsSection>& plugins_schema();

}  // namespace strata::detail
