#include "train/rank_run.hpp"

#include "strata/precision.hpp"

namespace strata {

std::shared_ptr<Model> RankRun::make_model() const {
  const ModelContext context{dataset->spec(), experiment.directory()};
  auto replica = registry.create_model(experiment.model.name, experiment.model.options, context);
  replica->set_activation_checkpointing(model->activation_checkpointing());
  return replica;
}

StrategySetup RankRun::strategy_setup() const {
  StrategySetup s;
  s.model = model;
  s.optimizer = experiment.optimizer;
  s.comm = comm.get();
  s.device = device;
  s.log = &log;
  s.precision.param = dtype_from_name(experiment.precision.param_dtype);
  s.precision.reduce = dtype_from_name(experiment.precision.reduce_dtype);
  s.local_world_size = world.local_world_size;
  s.make_model = [this] { return make_model(); };
  return s;
}

}  // namespace strata
